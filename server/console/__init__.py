"""The web console: see and steer a swarm from a browser (see docs/console.md and `site.py`)."""
