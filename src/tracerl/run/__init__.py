"""Recipe orchestration: the pipeline of stages, the RL stages and the one RL loop (docs/architecture.md)."""
