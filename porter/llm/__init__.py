"""Claude behind the porter's roles (`porter port SPEC --agent claude`; docs/LLM.md).

config.py     settings: porter.toml [llm] > PORTER_LLM_* > defaults; no key -> offline, one line
transport.py  the official SDK, retries on 429/529 with backoff, each attempt reported
record.py     every exchange in <run>/llm/exchanges.jsonl; ReplayTransport serves them back
tools.py      the four tools (write_kernel, plan, propose_variants, diagnose) and their checks
prompts.py    porter/prompts/*.j2 rendered per role; the hardware descriptor as cached prefix
client.py     one role's question: request, validation, retry of malformed replies, usage
inputs.py     what the model is shown of the op: reference, Triton or CUDA C++ kernel to port
roles.py      the Claude implementations of porter.roles' interfaces
judge.py      the harness on an untrusted kernel, in child processes with time limits
agent.py      the loop: plan, write, judge, debug, profile, search, keep or revert, stop
run.py        one run over every target: the pack, the summary; the client (SDK or replay)
cli.py        the port command's side: run, replay, the cost line
"""
