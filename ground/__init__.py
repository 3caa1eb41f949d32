"""twin's ground: the boundary layer every role, probe and grader stands on, importing nothing of twin's above.

`errors` (the exception family), `model` (the Model protocol and message types),
`sandbox` (the Sandbox protocol, `ExecResult`, `SandboxError`), `boundary` (what a
command may see or do), `isolation` (the policy that builds every sandbox's boundary),
`agent_tree` (how agent-written trees are read, copied and removed without trusting
them), `untrusted_io` (single files read and written in directories another uid can
write, and every record twin writes whole: `write_text_atomic`), `trajectory` (the
typed record of every model and tool call, which the model clients append to and the
run resumes from), `terminal` (the console on which agent text is never markup) and `sandboxes`
(the sandbox implementations, a floor above the rest).
Modules here import only each other; `tests/test_layers.py` holds every package to its floor.
"""
