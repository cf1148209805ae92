"""tracerl: agentic reinforcement learning for language models with an intact chain of evidence."""

__version__ = "0.1.0"
