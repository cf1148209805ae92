"""`tracerl serve --model PATH`: an OpenAI-compatible gateway over the torch engine (docs/gateway.md).

Every call is recorded as a span (`--spans FILE`, JSONL); episodes are started and finished over
HTTP. With `--env NAME` the gateway knows that environment's generated tasks, so an episode can be
finished with a task id whose verifier tracerl runs.

With `--api-key` (or `TRACERL_API_KEY`, several keys separated by commas) every route needs
`Authorization: Bearer KEY`; a key is required whenever the server listens beyond loopback or takes
weight pushes (`--accept-weights`), and the command refuses to start without one (exit 2).
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API that returns token ids and log-probs")
    p.add_argument("--model", required=True, help="a local HF model directory, a checkpoint, or a model id in the HF cache")
    p.add_argument("--name", default=None, help="the model id clients pass (default: the directory name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: a free one; default 8000)")
    p.add_argument("--max-tokens", type=int, default=256, help="completion budget when a request names none")
    p.add_argument("--stop", action="append", default=[], help="a stop string applied to every call (repeatable)")
    p.add_argument("--env", default=None, help="an environment whose tasks episodes may be finished with (verifier)")
    p.add_argument("--env-tasks", type=int, default=200, help="tasks of each split generated for --env (seed 0)")
    p.add_argument("--episode-timeout", type=float, default=600.0,
                   help="seconds an open episode may idle before it ends as wall_timeout")
    p.add_argument("--spans", default=None, help="append every call and episode record to this JSONL file")
    p.add_argument("--spans-max-mb", type=float, default=1024.0,
                   help="size cap of the --spans file in MiB: past it the file is renamed to FILE.1 (replacing an older "
                        "one) and a new FILE is started (default 1024; 0: no cap)")
    p.add_argument("--accept-weights", action="store_true",
                   help="accept POST /v1/weights?version=N (a trainer pushing new weights; rollout/remote_engine.py)")
    p.add_argument("--api-key", action="append", default=[],
                   help="a key clients must send as 'Authorization: Bearer KEY' (repeatable: one per client, and "
                        "episodes belong to the key that started them); default: $TRACERL_API_KEY (comma-separated). "
                        "Required beyond loopback and with --accept-weights")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20,
                   help="largest request body (bytes; default 1 MiB); weight pushes may be the model's size")
    p.add_argument("--call-timeout", type=float, default=300.0,
                   help="seconds a call may wait for the engine before a 503 (default 300)")
    p.add_argument("--require-episode-token", action="store_true",
                   help="reading or finishing an episode needs its X-Episode-Token even with the creator's key")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from tracerl.errors import UserError

    try:
        import uvicorn  # noqa: F401
        import fastapi  # noqa: F401
    except ImportError:
        raise UserError("tracerl serve needs fastapi and uvicorn; install them with pip install 'tracerl[serve]'") from None
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port; give 0..65535 (0 picks a free one)")
    import os

    from tracerl.serve.server import key_problem

    keys = [k.strip() for k in (args.api_key or os.environ.get("TRACERL_API_KEY", "").split(",")) if k.strip()]
    if any(len(k) < 8 for k in keys):
        raise UserError("an API key is shorter than 8 characters; give --api-key a longer secret")
    problem = key_problem(args.host, args.accept_weights, keys)
    if problem:
        raise UserError(problem)
    if not 0 <= args.spans_max_mb < 1 << 30:  # NaN too
        raise UserError(f"--spans-max-mb {args.spans_max_mb} must be a size in MiB (0: no cap)")
    if args.max_body_bytes < 1024 or args.call_timeout <= 0:
        raise UserError("--max-body-bytes must be at least 1024 and --call-timeout above 0; give larger values")
    import torch

    from tracerl.models import tokenizer_hashes
    from tracerl.train.checkpoint import load_checkpoint_model
    from tracerl.rollout import TorchEngine
    from tracerl.serve import EnvVerifier, EpisodeRegistry, Gateway
    from tracerl.serve.server import ServerThread

    torch.set_num_threads(args.threads)
    model, tok = load_checkpoint_model(args.model, key="--model")  # a checkpoint verified first; never unpickled
    verifier, stops, env_name = None, list(args.stop), "gateway"
    if args.env:
        from tracerl.envs import get_env

        spec = get_env(args.env)
        tasks = spec.generate("train", args.env_tasks, 0) + spec.generate("heldout", args.env_tasks, 0)
        verifier, env_name = EnvVerifier(spec, tasks), spec.name
        stops = list(dict.fromkeys([*spec.stop_strings, *stops]))
    registry = EpisodeRegistry(verifier=verifier, idle_timeout_s=args.episode_timeout, span_log=args.spans,
                               env_name=env_name, tokenizer_hashes=tokenizer_hashes(tok),
                               require_token=args.require_episode_token,
                               span_log_max_bytes=int(args.spans_max_mb * (1 << 20)) or None)
    name = args.name or Path(str(args.model).rstrip("/")).name
    gw = Gateway(TorchEngine(model, tok), model_name=name, registry=registry, default_max_tokens=args.max_tokens,
                 stop_strings=tuple(stops), accept_weights=args.accept_weights, api_keys=tuple(keys),
                 max_body_bytes=args.max_body_bytes, call_timeout_s=args.call_timeout)
    srv = ServerThread(gw, host=args.host, port=args.port)
    try:
        srv.start()
    except (RuntimeError, OSError) as err:
        raise UserError(f"could not listen on {args.host}:{args.port} ({err}); pick another --port") from None
    auth = f"{len(keys)} API key(s)" if keys else "no API key: loopback clients only"
    print(f"tracerl serve: model {name!r} at {srv.base_url} (policy version {gw.policy_version}; {auth}); Ctrl-C stops",
          flush=True)
    try:
        srv._thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
        gw.close()
        print(f"tracerl serve: stopped; {registry.stats()}", flush=True)
    return 0
