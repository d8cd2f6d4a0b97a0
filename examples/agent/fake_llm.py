"""An OpenAI-compatible chat completions endpoint on loopback that replays a
recorded conversation, for the agent example's test.

    python fake_llm.py RECORDING.json     # prints "listening on http://127.0.0.1:PORT/v1"

Each turn of the recording is {"expect": TEXT, "reply": MESSAGE}: the
request's last message must contain TEXT (the task, or a tool's result),
else the answer is 400 naming the difference; otherwise MESSAGE is the
assistant's reply. Requests without a bearer token get 401. It serves the
recording once per agent run: a request whose messages hold only the
system prompt and the task starts it again.
"""

import http.server
import json
import sys

turns = json.load(open(sys.argv[1]))
state = {"next": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if self.path != "/v1/chat/completions":
            return self.answer(404, {"error": {"message": f"no route {self.path}"}})
        if not self.headers.get("authorization", "").startswith("Bearer "):
            return self.answer(401, {"error": {"message": "no bearer token"}})
        req = json.loads(self.rfile.read(int(self.headers["content-length"])))
        messages = req["messages"]
        if len(messages) == 2:
            state["next"] = 0
        if state["next"] >= len(turns):
            return self.answer(400, {"error": {"message": "the recording has no more turns"}})
        turn = turns[state["next"]]
        last = messages[-1].get("content") or ""
        if turn["expect"] not in last:
            return self.answer(400, {"error": {"message": f"turn {state['next']}: expected {turn['expect']!r} in {last!r}"}})
        if not req.get("tools"):
            return self.answer(400, {"error": {"message": "the request offers no tools"}})
        state["next"] += 1
        finish = "tool_calls" if turn["reply"].get("tool_calls") else "stop"
        return self.answer(200, {
            "id": f"chatcmpl-{state['next']}", "object": "chat.completion", "model": req.get("model", ""),
            "choices": [{"index": 0, "message": turn["reply"], "finish_reason": finish}],
        })


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
server.serve_forever()
