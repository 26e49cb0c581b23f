# stage: estimators (filled by its issue)
