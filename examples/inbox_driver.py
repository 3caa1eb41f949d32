"""A program that answers twin's `--model inbox:DIR` requests from a script (see docs/models.md).

    python examples/inbox_driver.py INBOX SCRIPT.json

SCRIPT.json is a list of replies in the `scripted:` format ({content, tool_calls:
[{name, arguments}]}); request["call"] picks the reply, so a resumed run that repeats
a step gets the same answers again. A real driver would ask a model instead.
"""

import json
import os
import sys
import time
from pathlib import Path

inbox, script = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
while True:
    for path in sorted(inbox.glob("request-*.json")):
        n = path.stem.split("-")[1]
        reply_path = inbox / f"reply-{n}.json"
        if reply_path.exists():
            continue
        request = json.loads(path.read_text())
        entry = script[request["call"]]
        reply = {"role": "assistant", "content": entry.get("content", ""), "tool_calls": []}
        for i, call in enumerate(entry.get("tool_calls", [])):
            function = {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}
            reply["tool_calls"].append({"id": f"call_{n}_{i}", "type": "function", "function": function})
        tmp = inbox / f".reply-{n}.tmp"
        tmp.write_text(json.dumps(reply))
        os.replace(tmp, reply_path)  # atomic: twin never reads half a reply
    time.sleep(0.1)
