"""A fake Bedrock Runtime on 127.0.0.1 for the tests: Converse and ConverseStream in the real
wire formats (JSON; application/vnd.amazon.eventstream frames with CRCs). It checks the SigV4
signature of every request with botocore's own signer and the credentials it was given
(FAKE_AWS_ACCESS_KEY_ID, FAKE_AWS_SECRET_ACCESS_KEY): a request signed for another host or with
other credentials gets 403 InvalidSignatureException, as from AWS. Prints `PORT <n>` when
listening. GET /__stats tells how many requests it verified and refused, and the bytes of the
last stream it sent (base64)."""
import base64, json, os, struct, sys, threading, uuid, zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

CREDS = Credentials(os.environ["FAKE_AWS_ACCESS_KEY_ID"], os.environ["FAKE_AWS_SECRET_ACCESS_KEY"])
stats = {"verified": 0, "refused": 0, "last_stream": ""}
lock = threading.Lock()
calls = [0]


def signature_ok(handler, body):
    auth = handler.headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return False
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    akid, date, region, service, _ = fields["Credential"].split("/")
    if akid != CREDS.access_key:
        return False
    signed = fields["SignedHeaders"].split(";")
    headers = {name: handler.headers.get(name, "") for name in signed}
    url = f"http://{handler.headers.get('Host')}{handler.path}"
    request = AWSRequest(method=handler.command, url=url, data=body, headers=headers)
    request.context["timestamp"] = handler.headers.get("X-Amz-Date", "")
    signer = SigV4Auth(CREDS, service, region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return expected == fields["Signature"]


def header(name, value):
    n, v = name.encode(), value.encode()
    return bytes([len(n)]) + n + bytes([7]) + struct.pack(">H", len(v)) + v


def frame(event, payload):
    headers = header(":event-type", event) + header(":content-type", "application/json") + header(":message-type", "event")
    body = json.dumps(payload, separators=(",", ":")).encode()
    prelude = struct.pack(">II", 12 + len(headers) + len(body) + 4, len(headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, content_type, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with lock:
            self.send(200, json.dumps(stats).encode(), "application/json")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not signature_ok(self, body):
            with lock:
                stats["refused"] += 1
            message = b'{"message":"The request signature we calculated does not match the signature you provided."}'
            self.send(403, message, "application/json", [("x-amzn-ErrorType", "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/")])
            return
        with lock:
            stats["verified"] += 1
            calls[0] += 1
            n = calls[0]
        request = json.loads(body)
        content = request["messages"][-1]["content"]
        prompt = content if isinstance(content, str) else content[0]["text"]
        answer = f"You said: {prompt}"
        words = answer.split(" ")
        path = unquote(self.path)
        if path.endswith("/converse"):
            out = {"output": {"message": {"role": "assistant", "content": [{"text": answer}]}}, "stopReason": "end_turn",
                   "usage": {"inputTokens": 5, "outputTokens": len(words), "totalTokens": 5 + len(words)}, "metrics": {"latencyMs": 100 + n}}
            self.send(200, json.dumps(out).encode(), "application/json")
        elif path.endswith("/converse-stream"):
            pad = "x" * (n % 7 + 1)
            frames = [frame("messageStart", {"role": "assistant", "p": pad})]
            for i, w in enumerate(words):
                frames.append(frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w if i == 0 else " " + w}, "p": pad}))
            frames.append(frame("contentBlockStop", {"contentBlockIndex": 0, "p": pad}))
            frames.append(frame("messageStop", {"stopReason": "end_turn", "p": pad}))
            frames.append(frame("metadata", {"usage": {"inputTokens": 5, "outputTokens": len(words), "totalTokens": 5 + len(words)}, "metrics": {"latencyMs": 100 + n}, "p": pad}))
            stream = b"".join(frames)
            with lock:
                stats["last_stream"] = base64.b64encode(stream).decode()
            self.send(200, stream, "application/vnd.amazon.eventstream")
        elif path.endswith("/invoke"):
            # InvokeModel: the model's own body (Anthropic's Messages here).
            out = {"id": f"msg_bdrk_{n}", "type": "message", "role": "assistant", "model": "claude-3-haiku",
                   "content": [{"type": "text", "text": answer}], "stop_reason": "end_turn",
                   "usage": {"input_tokens": 5, "output_tokens": len(words)}}
            self.send(200, json.dumps(out).encode(), "application/json")
        elif path.endswith("/invoke-with-response-stream"):
            # The model's own stream events, each base64 in a `chunk` frame.
            events = [{"type": "message_start", "message": {"id": f"msg_bdrk_{n}", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}},
                      {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}]
            for i, w in enumerate(words):
                events.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w if i == 0 else " " + w}})
            events += [{"type": "content_block_stop", "index": 0},
                       {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": len(words)}},
                       {"type": "message_stop"}]
            stream = b"".join(frame("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode(), "p": "x" * (n % 5 + 1)}) for e in events)
            with lock:
                stats["last_stream"] = base64.b64encode(stream).decode()
            self.send(200, stream, "application/vnd.amazon.eventstream")
        else:
            self.send(404, b'{"message":"no such route"}', "application/json")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"PORT {server.server_address[1]}", flush=True)
server.serve_forever()
