"""Worlds of rooms, doors, keys and chests: generation, mechanics and a planner.

A world is a chain of rooms laid out on a grid. Each link between neighbouring rooms is an open
passage, a closed door or a locked door whose key lies earlier in the chain, on the floor or in a
chest. The goal is always to take the coin, which lies in the last room (at the top level, in a
chest). State is plain data (JSON-able), so that equal states hash equal across trajectories.
"""

from __future__ import annotations

import copy
import random
from collections import deque

ROOMS = ("hall", "kitchen", "study", "garden", "cellar", "attic", "library", "pantry")
COLORS = ("red", "blue", "green")
DIRS = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
LEVELS = (0, 1, 2, 3)
# level -> (rooms, link kinds to draw from, key in chest?, coin in chest?)
_LEVEL = {0: (2, ("open",), False, False), 1: (2, ("closed",), False, False),
          2: (2, ("locked",), False, False), 3: (3, ("closed", "locked"), True, True)}


def make_world(rng: random.Random, level: int) -> dict:
    n_rooms, kinds, key_in_chest, coin_in_chest = _LEVEL[level]
    names = rng.sample(ROOMS, n_rooms)
    pos = [(0, 0)]
    exits: dict[str, dict[str, str]] = {r: {} for r in names}
    doors: dict[str, str] = {}  # door id "a|b" (sorted names) -> open | closed | locked
    door_key: dict[str, str] = {}
    for i in range(1, n_rooms):
        options = [d for d, (dx, dy) in DIRS.items() if (pos[-1][0] + dx, pos[-1][1] + dy) not in pos]
        d = rng.choice(options)
        pos.append((pos[-1][0] + DIRS[d][0], pos[-1][1] + DIRS[d][1]))
        a, b = names[i - 1], names[i]
        exits[a][d], exits[b][OPPOSITE[d]] = b, a
        kind = kinds[(i - 1) % len(kinds)] if level == 3 else rng.choice(kinds)
        if kind != "open":
            doors[door_id(a, b)] = kind
    floor: dict[str, list[str]] = {r: [] for r in names}
    chests: dict[str, dict] = {}
    locked = [d for d, s in doors.items() if s == "locked"]
    for j, did in enumerate(locked):
        color = COLORS[j % len(COLORS)]
        door_key[did] = f"{color} key"
        before = names[: min(names.index(r) for r in did.split("|")) + 1]
        room = rng.choice(before)
        if key_in_chest:
            chests.setdefault(room, {"open": False, "items": []})["items"].append(f"{color} key")
        else:
            floor[room].append(f"{color} key")
    if coin_in_chest:
        chests.setdefault(names[-1], {"open": False, "items": []})["items"].append("coin")
    else:
        floor[names[-1]].append("coin")
    return {"rooms": names, "exits": exits, "door_key": door_key, "start": names[0],
            "state": {"at": names[0], "doors": doors, "floor": floor, "chests": chests, "inventory": []}}


def door_id(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


def describe(world: dict, state: dict) -> str:
    room = state["at"]
    parts = []
    for d, other in sorted(world["exits"][room].items()):
        status = state["doors"].get(door_id(room, other), "open")
        parts.append(d if status == "open" else f"{d} ({status} door)")
    seen = list(state["floor"][room])
    chest = state["chests"].get(room)
    if chest is not None:
        seen.append("chest (open)" if chest["open"] else "chest (closed)")
    return f"{room}. exits: {', '.join(parts)}. you see: {', '.join(seen) or 'nothing'}."


def apply(world: dict, state: dict, action: str) -> tuple[dict | None, str]:
    """Returns (new state, message) for a valid action, or (None, why) for an invalid one."""
    words = action.lower().split()
    room = state["at"]
    s = copy.deepcopy(state)
    if len(words) == 2 and words[0] == "go":
        other = world["exits"][room].get(words[1])
        if other is None:
            return None, f"no exit {words[1]}"
        status = state["doors"].get(door_id(room, other), "open")
        if status != "open":
            return None, f"the {words[1]} door is {status}"
        s["at"] = other
        return s, describe(world, s)
    if words[:1] == ["take"] and len(words) >= 2:
        item = " ".join(words[1:])
        if item in s["floor"][room]:
            s["floor"][room].remove(item)
        elif room in s["chests"] and s["chests"][room]["open"] and item in s["chests"][room]["items"]:
            s["chests"][room]["items"].remove(item)
        else:
            return None, f"no {item} here"
        s["inventory"] = sorted(s["inventory"] + [item])
        return s, f"you take the {item}."
    if words == ["open", "chest"]:
        chest = s["chests"].get(room)
        if chest is None or chest["open"]:
            return None, "no closed chest here"
        chest["open"] = True
        return s, f"the chest holds: {', '.join(chest['items']) or 'nothing'}."
    if words == ["open", "door"]:
        did = _door_here(world, s, "closed")
        if did is None:
            return None, "no closed door here"
        s["doors"][did] = "open"
        return s, "the door opens."
    if len(words) == 5 and words[:3] == ["unlock", "door", "with"] and words[4] == "key":
        did = _door_here(world, s, "locked")
        key = f"{words[3]} key"
        if did is None:
            return None, "no locked door here"
        if key not in s["inventory"]:
            return None, f"you have no {key}"
        if world["door_key"][did] != key:
            return None, f"the {key} does not fit"
        s["doors"][did] = "closed"
        return s, "the door is unlocked."
    return None, f"unknown action {action.strip()[:40]!r}"


def _door_here(world: dict, state: dict, status: str) -> str | None:
    room = state["at"]
    for other in world["exits"][room].values():
        did = door_id(room, other)
        if state["doors"].get(did) == status:
            return did
    return None


def is_goal(state: dict) -> bool:
    return "coin" in state["inventory"]


def candidate_actions(world: dict, state: dict) -> list[str]:
    """Every action the grammar can express in this world (valid or not), in a fixed order."""
    acts = [f"go {d}" for d in DIRS] + ["open door", "open chest"]
    items = sorted({i for r in world["rooms"] for i in state["floor"][r]}
                   | {i for c in state["chests"].values() for i in c["items"]} | set(state["inventory"]))
    acts += [f"take {i}" for i in items]
    acts += [f"unlock door with {c} key" for c in COLORS]
    return acts


def plan(world: dict, state: dict) -> list[str]:
    """Shortest action sequence to the goal (breadth-first search over the full, hidden state)."""
    import json

    start = json.dumps(state, sort_keys=True)
    queue, parent = deque([state]), {start: None}
    while queue:
        s = queue.popleft()
        if is_goal(s):
            path, key = [], json.dumps(s, sort_keys=True)
            while parent[key] is not None:
                key, act = parent[key]
                path.append(act)
            return path[::-1]
        for act in candidate_actions(world, s):
            nxt, _ = apply(world, s, act)
            if nxt is None:
                continue
            k = json.dumps(nxt, sort_keys=True)
            if k not in parent:
                parent[k] = (json.dumps(s, sort_keys=True), act)
                queue.append(nxt)
    raise ValueError("world has no solution")
