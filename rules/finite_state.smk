# stage: finite_state (filled by its issue)
