"""Run by verl's own Python (.venv-verl) from test_verl_engine.py: the project's verl pieces called through
verl's interfaces. Prints one JSON object on its last line.

    python verl_checks.py CONFIG_DIR DATA_FILE TOKENIZER_DIR
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
import warnings


def main(config_dir: str, data_file: str, tokenizer_dir: str) -> dict:
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    out: dict = {}
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="datamind_rl")  # struct mode: a key verl does not know fails here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        validate_config(
            config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
        )
    actor, rollout, algo = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.algorithm
    out["config"] = {
        "clip": [actor.clip_ratio_low, actor.clip_ratio_high],
        "lr": actor.optim.lr,
        "n": rollout.n,
        "max_assistant_turns": rollout.multi_turn.max_assistant_turns,
        "format": rollout.multi_turn.format,
        "adv_estimator": algo.adv_estimator,
        "filter_groups": bool(algo.filter_groups and algo.filter_groups.enable),
        "use_kl_loss": actor.use_kl_loss,
        "kl_in_reward": algo.use_kl_in_reward,
        "critic": need_critic(config),
        "reference": need_reference_policy(config),
        "train_batch_size": config.data.train_batch_size,
    }

    # The reward function, loaded the way verl's trainer loads it (path + name + reward_kwargs).
    reward_fn = get_custom_reward_fn(config)
    right = (
        "<think>Sum.</think><code>print(42)</code>user\n<interpreter>\n42\n</interpreter>\n"
        "assistant\n<think>So.</think><answer>42.9</answer>"
    )
    wrong = right.replace("42.9", "57")
    untagged = "The answer is 42."
    extra = {"question": "What is the total?"}
    out["reward"] = {
        name: reward_fn("datamind", text, "42", extra)
        for name, text in (("right", right), ("wrong", wrong), ("untagged", untagged))
    }

    # The tool, built from the generated tool config by verl's registry, used the way the agent loop uses it.
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
    from verl.tools.tool_registry import initialize_tools_from_config

    tools = initialize_tools_from_config(rollout.multi_turn.tool_config_path)
    tool = tools[0]
    loop = types.SimpleNamespace(  # the attributes ToolAgentLoop._call_tool reads
        tools={tool.name: tool}, max_tool_response_length=4096, tool_response_truncate_side="middle"
    )
    kwargs = {tool.name: {"create_kwargs": {"data_uri": data_file, "data_format": "csv"}}}
    agent = types.SimpleNamespace(request_id="trajectory-1")
    other = types.SimpleNamespace(request_id="trajectory-2")

    async def calls():
        def call(code):
            return FunctionCall(name=tool.name, arguments=json.dumps({"code": code}))

        first = await ToolAgentLoop._call_tool(
            loop, call("import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df['amount'].sum())"), kwargs, agent
        )
        second = await ToolAgentLoop._call_tool(loop, call("print(len(df))"), kwargs, agent)
        tool.session_idle_s = 0  # the next release closes every session, as when a trajectory sits idle
        isolated = await ToolAgentLoop._call_tool(loop, call("print(len(df))"), kwargs, other)
        replayed = await ToolAgentLoop._call_tool(loop, call("print(df['amount'].max())"), kwargs, agent)
        hostile = await ToolAgentLoop._call_tool(
            loop, call("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)"), kwargs, agent
        )
        return [r[0].text for r in (first, second, isolated, hostile, replayed)]

    out["tool"] = asyncio.run(calls())
    tool.close()

    # The turn format: verl's parser registry hands out the project's <code> parser.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    parser = ToolParser.get_tool_parser(rollout.multi_turn.format, tok)

    async def parse(text):
        content, calls_ = await parser.extract_tool_calls(tok(text, add_special_tokens=False)["input_ids"])
        return [json.loads(c.arguments)["code"] for c in calls_ if c.name == tool.name]

    out["parser"] = {
        "code": asyncio.run(parse("<think>Look.</think><code>print(1 + 1)</code>")),
        "answer": asyncio.run(parse("<think>Done.</think><answer>2</answer>")),
        "both": asyncio.run(parse("<think>x</think><code>print(1)</code><answer>2</answer>")),
    }

    from verl_joint_checks import checks  # (this directory)

    out["joint"] = checks(config, data_file, tokenizer_dir)
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
