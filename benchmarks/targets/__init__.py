"""What the peers' worker processes import: settings, apps and task definitions."""
