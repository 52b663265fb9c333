"""The OpenAI Python SDK against a base URL, for the end-to-end suite.

Usage: python openai_client.py BASE_URL MODEL

Runs streaming and non-streaming chat and completions, a stream with
usage asked for and one without, and a stream the client closes after a
few chunks; prints one JSON line per case with what the SDK parsed,
without the per-response id and time (which differ between two runs), so
two runs against the same deterministic engine print the same lines.
"""

import json
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base.rstrip("/") + "/v1", api_key="sk-e2e-python", max_retries=0, timeout=60)
PROMPT = "one two three four five six seven eight"


def out(case, **kw):
    print(json.dumps({"case": case, **kw}, sort_keys=True), flush=True)


def strip(d):
    for k in ("id", "created", "system_fingerprint"):
        d.pop(k, None)
    return d


r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=12)
out("chat", response=strip(r.model_dump()))

r = client.completions.create(model=model, prompt=PROMPT, max_tokens=12)
out("completions", response=strip(r.model_dump()))

chunks, content, usage = 0, "", None
with client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=16,
                                    stream=True, stream_options={"include_usage": True}) as s:
    for c in s:
        chunks += 1
        if c.choices and c.choices[0].delta.content:
            content += c.choices[0].delta.content
        if c.usage is not None:
            usage = c.usage.model_dump()
out("chat stream", chunks=chunks, content=content, usage=usage)

chunks, text, usages = 0, "", 0
with client.completions.create(model=model, prompt=PROMPT, max_tokens=16, stream=True) as s:
    for c in s:
        chunks += 1
        if c.choices:
            text += c.choices[0].text
        usages += c.usage is not None
out("completions stream, no usage asked", chunks=chunks, text=text, usage_chunks=usages)

s = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=2000, stream=True)
seen = 0
for c in s:
    seen += 1
    if seen == 3:
        break
s.close()
out("chat stream closed after 3 chunks", chunks=seen)
