"""Worker groups: where a model role's workers run (`placement:` in a recipe, config/placement.py).

A role is driven through one interface whatever hosts it — `call(op, **kw)` runs a command on every
worker and answers with rank 0's result, `kill(rank)`, `close()`, `placement` (where each worker is):

- in the trainer's process: the role object itself (`train/roles.py` `PolicyRole`, the reference,
  critic, PRM, teachers, grader);
- local processes: `train/fsdp_group.py` `LearnerGroup` (the trainer rank 0, commands broadcast);
- Ray actors: `placement/ray_group.py` `RayWorkerGroup` (one placement-group bundle per rank with its
  CPUs, GPUs and custom resources, a torch.distributed group across them), and without a group for a
  single-worker role (`placement.<role>.where: ray`): the frozen KL reference, teachers and judge
  (`remote_roles.py`), the trained critic and PRM with their optimizers (`remote_trained.py`).

The RL step (`run/rl_loop.py` `rl_step` → `train/update.py` `rl_update`) calls `roles.policy.train_steps`,
`roles.scores` and each trained role's `train_steps`, and never learns where they run. `record.py` keeps where
each role ran for the manifest.
"""
