"""ai-scheduler: a Kubernetes scheduler for AI and deep-learning clusters."""

__version__ = "0.1.0"
