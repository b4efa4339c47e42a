"""A local OpenAI-compatible chat-completions server with scripted replies, for tests.

It binds 127.0.0.1 on a free port, serves the replies in order and records every request."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLMServer:
    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append({"path": self.path, "body": body})
                if not self.path.endswith("/chat/completions") or not server.replies:
                    self.send_response(404 if server.replies else 500)
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "no scripted reply left"}}')
                    return
                content = server.replies.pop(0)
                payload = {"id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
                           "created": int(time.time()), "model": body.get("model", "scripted"),
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        assert self.port > 0
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def prompts(self) -> list[str]:
        return [r["body"]["messages"][-1]["content"] for r in self.requests]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
