"""A Streamable HTTP server (2025-11-25, JSON answers) that fails its client
in one way, named by the first argument. It binds 127.0.0.1 on a free port
and prints the port on its first line.

  stalled-delete   answers as a server should, but never answers the DELETE
                   that ends the session; its one tool is named with
                   terminal escape sequences and a right-to-left override
  stalled-refusal  refuses notifications/initialized with a 400 whose body
                   it never finishes
  ping-flood       answers tools/list on an event stream only once the
                   client has answered 300 pings sent first on it, each
                   answer held 0.2 s; the tool `peak` tells how many of
                   those answers were being sent at once at most
  html200          answers tools/list with a page of HTML, status 200
  get-retry0       answers every GET with `retry: 0` and ends the stream at
                   once; the tool `slow` answers after 2 s, and `gets`
                   tells how many GETs came
  forgetful        gives each handshake a session of its own; any tool call
                   forgets every session, as a restart would, and a request
                   naming one it does not know is refused as the TypeScript
                   SDK's examples refuse it: 400, "No valid session ID
                   provided"
  echo-500         answers every request with a 500 whose page repeats the
                   credentials it was sent (Authorization, X-Api-Key), as
                   some servers' and proxies' error pages do
  error-naming-key answers tools/list with a JSON-RPC error whose message
                   names the Authorization it was sent, as an API refusing
                   a key often does
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = sys.argv[1]
PINGS = 300
EVIL = "evil\u001b]0;pwned\u0007\u001b[2J\u202eeman"

lock = threading.Condition()
state = {"pongs": 0, "open": 0, "peak": 0, "gets": 0, "sessions": set(), "made": 0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body=None, headers=()):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        session = getattr(self, "session", "s1")
        if session is not None:
            self.send_header("Mcp-Session-Id", session)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def do_DELETE(self):
        if MODE == "stalled-delete":
            time.sleep(3600)
        self.reply(200)

    def do_GET(self):
        if MODE != "get-retry0":
            return self.reply(405)
        with lock:
            state["gets"] += 1
        note = {"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "debug", "data": "listening"}}
        event = f"retry: 0\ndata: {json.dumps(note)}\n\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(event)))
        self.end_headers()
        self.wfile.write(event)
        self.wfile.flush()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        message = json.loads(self.rfile.read(length) or b"null")
        if MODE == "echo-500":
            page = (f"Internal error. You sent: {self.headers.get('Authorization')} "
                    f"key={self.headers.get('X-Api-Key')}").encode()
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return None
        method = message.get("method") if isinstance(message, dict) else None
        if method is None:
            return self.answered()
        if MODE == "forgetful":
            with lock:
                if method == "initialize":
                    state["made"] += 1
                    self.session = f"s{state['made']}"
                    state["sessions"].add(self.session)
                elif self.headers.get("Mcp-Session-Id") not in state["sessions"]:
                    refusal = {"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32000, "message": "Bad Request: No valid session ID provided"}}
                    self.session = None
                    return self.reply(400, refusal)
                else:
                    self.session = self.headers.get("Mcp-Session-Id")
                if method == "tools/call":
                    state["sessions"].clear()
        if "id" not in message:
            if MODE == "stalled-refusal" and method == "notifications/initialized":
                self.send_response(400)
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.write(b"not all")
                self.wfile.flush()
                time.sleep(3600)
            return self.reply(202)
        if MODE == "error-naming-key" and method == "tools/list":
            refusal = {"code": -32001,
                       "message": f"invalid API key: {self.headers.get('Authorization')}"}
            return self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "error": refusal})
        result = self.result(method, message.get("params") or {})
        if MODE == "ping-flood" and method == "tools/list":
            return self.flood(message["id"], result)
        if MODE == "html200" and method == "tools/list":
            page = b"<html><body>Sign in</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return None
        self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": result})

    def result(self, method, params):
        if method == "initialize":
            return {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "faulty", "version": "1"},
            }
        if method == "tools/list":
            name = EVIL if MODE == "stalled-delete" else "peak"
            return {"tools": [{"name": name, "description": "\u001b[31mred",
                               "inputSchema": {"type": "object"}}]}
        if method == "tools/call":
            if params.get("name") == "slow":
                time.sleep(2)
            with lock:
                said = f"peak {state['peak']} gets {state['gets']}"
            return {"content": [{"type": "text", "text": said}]}
        return {}

    def answered(self):
        # An answer to a ping: held a while, so that answers sent at once
        # are here at once.
        with lock:
            state["open"] += 1
            state["peak"] = max(state["peak"], state["open"])
        time.sleep(0.2)
        with lock:
            state["open"] -= 1
            state["pongs"] += 1
            lock.notify_all()
        self.reply(202)

    def flood(self, request_id, result):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Mcp-Session-Id", "s1")
        self.send_header("Connection", "close")
        self.end_headers()
        for n in range(PINGS):
            ping = {"jsonrpc": "2.0", "id": f"ping-{n}", "method": "ping"}
            self.wfile.write(f"data: {json.dumps(ping)}\n\n".encode())
        self.wfile.flush()
        with lock:
            lock.wait_for(lambda: state["pongs"] >= PINGS, timeout=60)
        answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
        self.wfile.write(f"data: {json.dumps(answer)}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
