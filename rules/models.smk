# stage: models (filled by its issue)
