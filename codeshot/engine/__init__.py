"""The Code Shot engine: grammar (``fewshot``), prompt, components and the executor loop.

Free of AWS imports; commands reach Funcs and agents through injected callers. Import
from the submodules: the SDK needs only the grammar, and importing this package must not
load the executor.
"""
