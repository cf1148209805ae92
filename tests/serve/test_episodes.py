"""Episodes over HTTP: a two-call episode merges into one trajectory when the second prompt extends the
first call's prompt + completion, and splits into two (each with the episode's return) when not;
an abandoned episode ends labelled. Real `openai` client, real server on 127.0.0.1."""

import json
import time

import httpx

from tracerl.contract import TerminalReason, TokenRole, validate
from tracerl.envs.calc_json import INSTRUCTIONS, TOOLS, calculator
from tracerl.envs.json_tools import format_tool_call
from tracerl.rollout.agent_loop import LoopBudgets, run_episodes

from .conftest import ScriptedEngine


def _start(srv, **body):
    r = httpx.post(srv.base_url + "/episodes", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["episode_id"]


def _finish(srv, eid, **body):
    r = httpx.post(srv.base_url + f"/episodes/{eid}/finish", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _agent(client, eid, task, *, rewrite_history=False):
    """What examples/gateway_agent does: one tool call, then the answer."""
    msgs = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": str(task.prompt)}]
    hdr = {"X-Episode-Id": eid}
    r = client.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS, extra_headers=hdr)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.tool_calls[0].function.name == "calculator"
    expr = json.loads(msg.tool_calls[0].function.arguments)["expression"]
    if rewrite_history:  # an agent that summarises its history: the prompt no longer extends the first call
        msgs = [{"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": f"{task.prompt} The calculator says {calculator(expr)}."}]
    else:
        msgs += [msg.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": calculator(expr)}]
    r2 = client.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS, extra_headers=hdr)
    return r, r2


def _turns(task):
    return [format_tool_call("calculator", {"expression": task.metadata["expression"]}), f"<answer>{task.answer}</answer>"]


def test_two_calls_that_extend_merge_into_the_agent_loops_trajectory(scripted, tiny):
    spec, tasks, model, tok = tiny
    task = tasks[0]
    gw, srv, client = scripted(_turns(task))
    eid = _start(srv, task_id=task.id)
    r1, r2 = _agent(client, eid, task)
    assert r2.model_extra["tracerl"]["extends_span"] == r1.model_extra["tracerl"]["span_id"]
    p1, c1 = r1.model_extra["prompt_token_ids"], r1.choices[0].model_extra["token_ids"]
    assert r2.model_extra["prompt_token_ids"][:len(p1) + len(c1)] == p1 + c1  # the sampled ids, not re-tokenized
    out = _finish(srv, eid, task_id=task.id)
    assert (out["trajectories"], out["merges"], out["splits"]) == (1, 1, 0)
    assert out["terminal_reason"] == "eos" and out["reward_components"] == {"correct": 1.0, "format": 1.0}
    [traj] = gw.registry.get(eid).trajectories
    validate(traj)
    # the in-process agent loop, playing the same two turns on the env, builds the same token sequence and roles
    [loop] = run_episodes(ScriptedEngine(model, tok, _turns(task)), spec, [task], ["g"],
                          budgets=LoopBudgets(max_turns=3, max_tokens=400, max_new_tokens=64),
                          sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, policy_version=0, seed=0)
    assert traj.token_ids == loop.token_ids and traj.roles == loop.roles
    assert traj.reward == loop.reward == 1.0
    n_action = sum(r == TokenRole.ACTION for r in traj.roles)
    assert n_action == len(c1) + len(r2.choices[0].model_extra["token_ids"])
    assert [s.kind for s in traj.spans].count("observation") == 1


def test_a_rewritten_history_splits_into_two_trajectories_each_with_the_return(scripted, tiny):
    _, tasks, _, _ = tiny
    task = tasks[1]
    gw, srv, client = scripted(_turns(task))
    eid = _start(srv, task_id=task.id)
    r1, r2 = _agent(client, eid, task, rewrite_history=True)
    assert r2.model_extra["tracerl"]["extends_span"] is None
    out = _finish(srv, eid, task_id=task.id)
    assert (out["trajectories"], out["merges"], out["splits"]) == (2, 0, 1)
    trajs = gw.registry.get(eid).trajectories
    assert [t.reward for t in trajs] == [1.0, 1.0]  # the episode's return on each call
    assert [t.verifier_output["segment"] for t in trajs] == [0, 1]
    assert trajs[1].token_ids[:len(r2.model_extra["prompt_token_ids"])] == r2.model_extra["prompt_token_ids"]
    # over HTTP too, serialized
    data = httpx.get(srv.base_url + f"/episodes/{eid}/trajectories", timeout=30).json()
    assert len(data["data"]) == 2 and data["splits"] == 1


def test_completion_calls_merge_when_the_prompt_extends(scripted, tiny):
    _, tasks, _, tok = tiny
    gw, srv, client = scripted(["<answer>1</answer>", "<answer>2</answer>", "<answer>3</answer>"])
    eid = _start(srv)
    p = tok("Ann has 3 coins.", add_special_tokens=False)["input_ids"]
    c1 = client.completions.create(model="tiny", prompt=p, max_tokens=8, extra_headers={"X-Episode-Id": eid})
    ids1 = c1.choices[0].model_extra["token_ids"]
    obs = tok("<tool_response>ok</tool_response>", add_special_tokens=False)["input_ids"]
    c2 = client.completions.create(model="tiny", prompt=p + ids1 + obs, max_tokens=8, extra_body={"metadata": {"episode_id": eid}})
    client.completions.create(model="tiny", prompt=p[1:], max_tokens=8, extra_headers={"X-Episode-Id": eid})
    out = _finish(srv, eid, reward=0.5)
    assert (out["calls"], out["trajectories"], out["merges"], out["splits"]) == (3, 2, 1, 1)
    first = gw.registry.get(eid).trajectories[0]
    assert first.roles[len(p) + len(ids1):len(p) + len(ids1) + len(obs)] == [TokenRole.OBSERVATION] * len(obs)
    assert c2.model_extra["tracerl"]["extends_span"] == c1.model_extra["tracerl"]["span_id"]
    assert [t.reward for t in gw.registry.get(eid).trajectories] == [0.5, 0.5]


def test_an_abandoned_episode_ends_as_wall_timeout_and_a_failed_agent_as_infra_failure(scripted, tiny, tmp_path):
    gw, srv, client = scripted(["<answer>1</answer>"] * 3, idle_timeout_s=3.0)
    idle = _start(srv, episode_id="idle-1")
    client.completions.create(model="tiny", prompt="Ann has", max_tokens=4, extra_headers={"X-Episode-Id": idle})
    failed = _start(srv)
    client.completions.create(model="tiny", prompt="Bo has", max_tokens=4, extra_headers={"X-Episode-Id": failed})
    assert _finish(srv, failed, error="agent raised KeyError")["terminal_reason"] == "infra_failure"
    for _ in range(400):  # bounded (20 s): the reaper runs every 0.05 s, the episode idles out after 3 s
        if httpx.get(srv.base_url + f"/episodes/{idle}", timeout=30).json()["finished"]:
            break
        time.sleep(0.05)
    ep = gw.registry.get(idle)
    assert ep.terminal_reason == TerminalReason.WALL_TIMEOUT and ep.trajectories[0].truncated
    assert ep.trajectories[0].reward == 0.0 and "abandoned" in ep.trajectories[0].verifier_output
    assert gw.registry.get(failed).trajectories[0].terminal_reason == TerminalReason.INFRA_FAILURE
    # a gateway shutting down ends what is still open as infra_failure, never silently
    left = _start(srv)
    gw.registry.close()
    assert gw.registry.get(left).terminal_reason == TerminalReason.INFRA_FAILURE
    log = [json.loads(x) for x in (tmp_path / "spans.jsonl").read_text().splitlines()]
    ends = {e["episode_id"]: e["terminal_reason"] for e in log if e["record"] == "episode_end"}
    assert ends == {idle: "wall_timeout", failed: "infra_failure", left: "infra_failure"}
    assert sum(e["record"] == "call" for e in log) == 2
