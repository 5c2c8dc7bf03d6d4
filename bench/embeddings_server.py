"""A minimal OpenAI-compatible `/v1/embeddings` server over Mnemos' local embedder, on loopback.

    python -m bench.embeddings_server --port 8099

It lets a peer (Mem0's OpenAI embedder) use exactly the model Mnemos uses, and lets anyone try
`MNEMOS_EMBEDDER=http://127.0.0.1:8099` against a real endpoint. Bench tool, not a product.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mnemos.domain.ports import Embedder
from mnemos.embedding import load_embedder


def serve(embedder: Embedder, port: int = 0) -> ThreadingHTTPServer:
    """Start serving in a daemon thread; the caller reads `server_address` and shuts it down."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (the http.server API)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            texts = body["input"]
            texts = [texts] if isinstance(texts, str) else texts
            vectors = embedder.embed(texts)
            answer = {
                "object": "list",
                "model": embedder.model,
                "data": [
                    {"object": "embedding", "index": i, "embedding": vector.tolist()}
                    for i, vector in enumerate(vectors)
                ],
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            }
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    embedder = load_embedder("local")
    assert embedder is not None
    server = serve(embedder, args.port)
    print(f"serving {embedder.model} on http://127.0.0.1:{server.server_address[1]}/v1/embeddings")
    threading.Event().wait()


if __name__ == "__main__":
    main()
