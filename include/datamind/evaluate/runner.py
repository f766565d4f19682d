"""Run an agent over benchmark items: the same ReAct loop, prompts and sandbox as trajectory sampling.

The agent under test sees exactly the prompt format a trained model saw in its samples (the plain
system prompt: no task category, no workflow hints), Python for CSV/XLSX and the SQL helpers for
databases. Its policy is either an OpenAI-compatible endpoint (``LLMExpertPolicy`` with the ``agent``
role) or, on the project's held-out split only, the offline expert replaying the query's programs.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from datamind.agent import templates
from datamind.agent.loop import AgentResult, run_agent
from datamind.agent.params import RolloutParams
from datamind.agent.policies.llm_expert import LLMExpertPolicy
from datamind.agent.runner import SandboxPool, offline_policy
from datamind.agent.tasks import QueryTask, TaskError, load_tasks
from datamind.evaluate.suites import EvalItem

AGENT_ROLE = "agent"


@dataclass
class Trial:
    item: EvalItem
    trial: int
    result: AgentResult | None
    model: str | None
    error: str | None = None  # the agent could not run at all (no programs for the offline policy, ...)


def _task(item: EvalItem) -> QueryTask:
    """The sandbox session's view of an item: its data file and language (no task category: none is known)."""
    query = {"query_id": item.item_id, "question": item.question}
    return QueryTask(query, [query], item.data_path, item.data_format)


WITHHELD_LINE = "Data source: none. The file `{name}` is withheld: answer from the question alone."


def prompts_for(item: EvalItem, max_turns: int, withhold_data: bool = False) -> tuple[str, str]:
    """(system, user) exactly as a training sample records them; with ``withhold_data`` the user's data line
    says the file is withheld (the leak control: nothing is staged)."""
    system, user = _prompts(item, max_turns)
    if not withhold_data:
        return system, user
    note = WITHHELD_LINE.format(name=_task(item).file_name)
    lines = user.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith("Data source:")), None)
    return system, "\n".join(lines[:at] + [note] + lines[at + 1 :]) if at is not None else f"{note}\n\n{user}"


def _prompts(item: EvalItem, max_turns: int) -> tuple[str, str]:
    system_t, user_t = templates.load("rollout/system.j2"), templates.load("rollout/user.j2")
    name = _task(item).file_name
    system = system_t.render(
        max_turns=max_turns, data_format=item.data_format, file_name=name, read_hint="", category_name="", workflow=""
    )
    if item.extra.get("user"):  # the held-out split: the task exactly as its sample states it
        return system, item.extra["user"]
    return system, user_t.render(file_name=name, data_format=item.data_format, question=item.question, sheet=None)


class Runner:
    def __init__(self, params, agent_client: Any | None, root=None, sandbox: Any | None = None) -> None:
        self.p = params
        self.client = agent_client
        self.root = root
        self.rollout = RolloutParams(
            backend="llm" if agent_client is not None else "offline",
            max_turns=params.max_turns,
            concurrency=params.concurrency,
            exec_workers=params.exec_workers,
        )
        self._sandbox = sandbox
        self._heldout_tasks: dict[str, QueryTask] = {}

    def _policy(self, item: EvalItem, trial: int, task: QueryTask):
        if self.client is not None:
            sampling = {"temperature": self.p.temperature, "top_p": self.p.top_p, "max_tokens": self.p.max_tokens}
            version = json.dumps({"eval": "react@" + templates.load("rollout/system.j2").version})
            return LLMExpertPolicy(
                self.client, params=sampling, sample_index=trial, template_version=version, role=AGENT_ROLE
            )
        if item.suite != "heldout":
            raise TaskError("no_agent", "the offline reference policy only runs on the held-out split")
        own = self._heldout_tasks.get(item.item_id)
        if own is None:
            raise TaskError("no_reference_solution", f"query {item.item_id} is not in this data root's queries")
        return offline_policy(own, trial, max_turns=self.p.max_turns)

    async def _one(self, pool: SandboxPool, item: EvalItem, trial: int, gate: asyncio.Semaphore) -> Trial:
        task = _task(item)
        async with gate:
            try:
                policy = self._policy(item, trial, task)
            except TaskError as exc:
                return Trial(item, trial, None, None, f"{exc.code}: {exc}")
            withhold = getattr(self.p, "withhold_data", False)
            if withhold and task.language != "python":
                return Trial(item, trial, None, None, "withheld_data: a database question cannot run without it")
            system, user = prompts_for(item, self.p.max_turns, withhold)
            async with pool.session(task, files=[] if withhold else None) as sess:
                result = await run_agent(
                    policy,
                    sess.run,
                    system=system,
                    user=user,
                    max_turns=self.p.max_turns,
                    max_consecutive_void=self.rollout.max_consecutive_void,
                    executor=pool.threads,
                )
            return Trial(item, trial, result, getattr(policy, "name", None))

    def run(self, items: list[EvalItem]) -> list[Trial]:
        if self.client is None and any(i.suite == "heldout" for i in items):
            tasks, _ = load_tasks(self.root, sorted({i.item_id for i in items if i.suite == "heldout"}))
            self._heldout_tasks = tasks

        async def main() -> list[Trial]:
            gate = asyncio.Semaphore(self.p.concurrency)
            try:
                with SandboxPool(self.rollout, self._sandbox) as pool:
                    return list(
                        await asyncio.gather(
                            *(self._one(pool, item, t, gate) for item in items for t in range(self.p.trials))
                        )
                    )
            finally:
                if self.client is not None:
                    await self.client.aclose()  # its connections belong to this event loop

        return asyncio.run(main())
