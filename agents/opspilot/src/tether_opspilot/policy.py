"""OpsPilot's scripted brain: no network. It understands the demo's requests, follows "it" /
"the one just now" through confirmed facts and recent turns, and answers in plain words. Given the
same transcript it always decides the same step, so a step retried after a crash repeats itself
exactly (the engine then skips what was already streamed)."""

from __future__ import annotations

import re
from typing import Any

from tether_sdk import ModelRequest, Option, ProvideInput, SelectOption, ToolCall

_INSTANCE = re.compile(r"\b([a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)+-\d+)\b")
_SERVICE = re.compile(r"\b([a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)+)\b")
_REFERS = re.compile(r"\b(it|its|the one just now|that one|this one|that instance|this instance)\b")
_STREAM = re.compile(r"^\s*(?:stream|bench)\s+(\d+)\s+deltas?\b")


Step = str | list[str] | ToolCall | SelectOption | ProvideInput
QUESTIONS = ("select_option", "provide_input")


def decide(req: ModelRequest) -> Step:
    """One step of OpsPilot's scripted brain."""
    msgs = req.messages
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    text = str(msgs[last_user]["content"]).strip()
    lower = text.lower()
    results: list[dict[str, Any]] = [
        {"tool": r.tool, "ok": r.ok, "summary": r.summary, "data": r.data, "outcome": r.outcome}
        for r in req.results()
    ]

    bench = _STREAM.match(lower)
    if bench:
        return [f"t{i} " for i in range(int(bench.group(1)))]

    facts = dict(req.facts)
    service, env, instance = _targets(lower, facts, msgs[:last_user])

    if "restart" in lower or "reboot" in lower:
        return _restart(results, service, env, instance, lower)
    if "scale" in lower:
        return _scale(results, service, env, lower)
    if "log" in lower:
        if not instance and service and not results:
            return ToolCall(
                "find_instances",
                {"service": service, "env": env, "status": "abnormal"},
            )
        if not instance and results:
            found = results[-1]["data"].get("instances", [])
            instance = found[0]["id"] if found else ""
        if not instance:
            return "Which instance's logs do you want? Name a service or instance."
        if not any(r["tool"] == "get_logs" for r in results):
            owner = service or instance.rsplit("-", 1)[0]
            return ToolCall("get_logs", {"service": owner, "env": env, "instance_id": instance})
        if not results[-1]["ok"]:
            if results[-1]["outcome"] == "denied":
                return f"You are not allowed to read the logs of {instance}, so I did not."
            return f"I could not read the logs of {instance}: {results[-1]['summary']}."
        lines = results[-1]["data"].get("lines", [])
        body = "; ".join(f"{ln['level']} {ln['line']}" for ln in lines[:4]) or "no lines"
        return f"The latest logs of {instance}: {body}."
    if "error" in lower or "investigat" in lower:
        if not service:
            return "Which service should I look at? For example: payment-api in prod."
        if not results:
            return ToolCall("recent_errors", {"service": service, "env": env})
        if results[-1]["outcome"] == "denied":
            return f"You are not allowed to read the errors of {service} in {env}, so I did not."
        d = results[-1]["data"]
        worst = d.get("worst_instance")
        tail = f", most of them on {worst}" if worst else ""
        return (
            f"{service} in {env} had {d.get('count', 0)} recent errors "
            f"({d.get('count_5xx', 0)} of them 5xx){tail}."
        )
    if service and ("instance" in lower or "status" in lower or "health" in lower):
        if not results:
            args: dict[str, Any] = {"service": service, "env": env}
            if "abnormal" in lower:
                args["status"] = "abnormal"
            return ToolCall("find_instances", args)
        return f"{service} in {env}: {results[-1]['summary']}."
    return (
        "I can look up instances, recent errors and logs, and restart an instance or "
        "scale a service once you approve. Try: restart the abnormal payment-api instance."
    )


def _scale(results: list[dict[str, Any]], service: str, env: str, lower: str) -> Step:
    if not service:
        return "Which service should I scale, and to how many replicas?"
    m = re.search(r"\bto\s+(\d+)\b", lower) or re.search(r"\b(\d+)\s+replicas?\b", lower)
    asked = [r for r in results if r["tool"] == "provide_input"]
    done = [r for r in results if r["tool"] not in QUESTIONS]
    if done:
        return _after_mutation(done[-1], f"service {service}")
    if asked and asked[-1]["outcome"] != "answered":
        return f"Without a replica count I did not scale {service}."
    if m:
        replicas = int(m.group(1))
    elif asked:
        replicas = int(asked[-1]["data"]["fill"]["replicas"])
    else:
        # The count is missing: ask for it, and continue this same run with the answer.
        return ProvideInput(
            prompt=f"How many replicas should {service} in {env} run?",
            title=f"Scale {service}",
            schema={
                "type": "object",
                "properties": {
                    "replicas": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": 50,
                        "description": "the new replica count (0-50)",
                    }
                },
                "required": ["replicas"],
                "additionalProperties": False,
            },
        )
    return ToolCall("scale_service", {"service": service, "env": env, "replicas": replicas})


def _restart(
    results: list[dict[str, Any]],
    service: str,
    env: str,
    instance: str,
    lower: str,
) -> Step:
    # Whatever was attempted after the lookup (a restart, or a call the gate blocked) ends it.
    restarts = [r for r in results if r["tool"] not in ("find_instances", *QUESTIONS)]
    if restarts:
        if not instance:  # found by the lookup ("the abnormal one"), or picked by a person
            chosen = [r for r in results if r["tool"] == "select_option"]
            finds = [r for r in results if r["tool"] == "find_instances"]
            if chosen and chosen[-1]["outcome"] == "answered":
                instance = str(chosen[-1]["data"]["option"])
            elif finds and len(finds[-1]["data"].get("instances", [])) == 1:
                instance = finds[-1]["data"]["instances"][0]["id"]
        return _after_mutation(restarts[-1], f"instance {instance or 'it'}")
    picked = [r for r in results if r["tool"] == "select_option"]
    if picked and picked[-1]["outcome"] != "answered":
        return f"Nobody chose an instance of {service}, so I restarted none."
    if picked:
        instance = str(picked[-1]["data"]["option"])
    if "abnormal" in lower or not instance:
        if not service:
            return "Which service's instance should I restart?"
        finds = [r for r in results if r["tool"] == "find_instances"]
        if not finds:
            return ToolCall(
                "find_instances",
                {"service": service, "env": env, "status": "abnormal"},
            )
        found = finds[-1]["data"].get("instances", [])
        if not found:
            return f"I found no abnormal instance of {service} in {env}, so there is nothing to restart."
        if len(found) > 1 and not picked:
            # Two candidates: a person picks one, and this same run restarts it.
            return SelectOption(
                prompt=f"{service} has {len(found)} abnormal instances. Which one should I restart?",
                title=f"Restart which {service} instance?",
                options=[
                    Option(i["id"], f"{i['id']} ({i['status']}, {i['restart_count']} restarts)")
                    for i in found
                ],
            )
        if not picked:
            instance = found[0]["id"]
    return ToolCall(
        "restart_instance",
        {
            "service": service or instance.rsplit("-", 1)[0],
            "env": env,
            "instance_id": instance,
            "reason": "abnormal status and recent 5xx",
        },
    )


def _after_mutation(result: dict[str, Any], what: str) -> str:
    outcome = result.get("outcome", "")
    if outcome == "rejected":
        return f"Understood: I did not touch {what}. Nothing was changed."
    if outcome == "expired":
        return f"The approval request for {what} expired before anyone answered, so I did nothing."
    if outcome == "denied":
        return f"You are not allowed to do that to {what}, so I did not."
    if outcome == "skipped":
        return f"I did not act: {result['summary']}. Nothing needed doing."
    if outcome == "abandoned":
        return f"Understood: we don't know whether {what} was changed, and I will not try again."
    if outcome == "marked_done":
        return f"Noted: {what} was handled, as you confirmed."
    if outcome == "invalid":
        return f"I could not act on {what}: {result['summary']}."
    if outcome == "blocked":
        return f"That action is blocked by policy, so {what} was not touched."
    if not result.get("ok"):
        return f"The action on {what} failed: {result['summary']}."
    return f"Done: {result['summary']}."


def _targets(
    lower: str, facts: dict[str, Any], earlier: list[dict[str, Any]]
) -> tuple[str, str, str]:
    """Explicit names win; "it" resolves through confirmed facts, then the recent turns."""
    env = "staging" if "staging" in lower else str(facts.get("env") or "prod")
    inst = _INSTANCE.search(lower)
    instance = inst.group(1) if inst else ""
    svc = next((s for s in _SERVICE.findall(lower) if not _INSTANCE.fullmatch(s)), "")
    service = svc or (instance.rsplit("-", 1)[0] if instance else "")
    if _REFERS.search(lower) or not service:
        if not instance and "abnormal" not in lower:
            instance = str(facts.get("instance_id") or "")
            if not instance:
                for m in reversed(earlier):
                    found = _INSTANCE.search(str(m.get("content", "")).lower())
                    if found:
                        instance = found.group(1)
                        break
        if not service:
            service = str(facts.get("service") or "")
            if not service:
                for m in reversed(earlier):
                    found_s = [
                        s
                        for s in _SERVICE.findall(str(m.get("content", "")).lower())
                        if not _INSTANCE.fullmatch(s)
                    ]
                    if found_s:
                        service = found_s[0]
                        break
    if instance and not service:
        service = instance.rsplit("-", 1)[0]
    return service, env, instance
