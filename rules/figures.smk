# stage: figures (filled by its issue)
