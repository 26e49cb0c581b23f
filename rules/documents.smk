# stage: documents (filled by its issue)
