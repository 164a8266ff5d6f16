"""The Code Shot engine: grammar, prompt, components and the executor loop.

Free of AWS imports; commands reach Funcs and agents through injected callers.
"""

from codeshot.engine.builtin import (
    AgentCaller,
    AgentTool,
    FuncCaller,
    SessionHistory,
    code_shot_components,
    planner_components,
)
from codeshot.engine.components import Command, CommandResult, command
from codeshot.engine.executor import Executor, Limits, Outcome, Status, TraceStep
from codeshot.engine.fewshot import (
    FewShot,
    FewShotError,
    func_names,
    parse_few_shots,
    sample_queries,
    validate_base_prompt,
)

__all__ = [
    "AgentCaller",
    "AgentTool",
    "Command",
    "CommandResult",
    "Executor",
    "FewShot",
    "FewShotError",
    "FuncCaller",
    "Limits",
    "Outcome",
    "SessionHistory",
    "Status",
    "TraceStep",
    "code_shot_components",
    "command",
    "func_names",
    "parse_few_shots",
    "planner_components",
    "sample_queries",
    "validate_base_prompt",
]
