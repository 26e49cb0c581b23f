# stage: trajectories (filled by its issue)
