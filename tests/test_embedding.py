"""Embedders: the local model, an OpenAI-compatible endpoint (a real server on loopback), `none`."""

from __future__ import annotations

import contextlib
import json
import os
import string
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mnemos.config import Settings
from mnemos.embedding import embedder_from_settings, integer, load_embedder, worker_embedder
from mnemos.embedding.integer import derive, derived_model
from mnemos.embedding.local import WEIGHTS_SHA256, LocalEmbedder, _session, _weights
from mnemos.embedding.remote import EndpointEmbedder, endpoint_url
from mnemos.embedding.wordpiece import WordPiece
from mnemos.errors import EmbedderUnavailable

# A question, the memory that answers it in other words, and memories that do not.
PARAPHRASES = [
    (
        "Where does the client like to sit on a plane?",
        "The customer prefers aisle seats on long flights.",
    ),
    ("What is Maria allergic to?", "Maria cannot eat peanuts; they make her throat swell."),
    (
        "How do I restart the build server?",
        "To reboot the CI machine, ssh in and run systemctl restart jenkins.",
    ),
    (
        "When is the rent due?",
        "The landlord expects the monthly payment by the first of each month.",
    ),
    ("What language should replies be written in?", "Always answer the user in Spanish."),
]


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder(threads=2)


def test_local_vectors_have_the_port_shape_and_are_normalised(local: LocalEmbedder) -> None:
    texts = ["aisle seats", "", "x" * 5000, "Ünïcödé 東京 emoji 🙂", "window seats"]
    vectors = local.embed(texts)
    assert vectors.shape == (5, local.dimensions) == (5, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert local.embed([]).shape == (0, 384)
    assert local.model == "all-MiniLM-L6-v2-int8"  # the weights, whatever the kernels


def test_local_vectors_do_not_depend_on_batch_or_order(local: LocalEmbedder) -> None:
    texts = [memory for _, memory in PARAPHRASES] + ["short", "a much longer text " * 20]
    together = local.embed(texts)
    alone = np.vstack([local.embed([text]) for text in texts])
    reversed_ = local.embed(texts[::-1])[::-1]
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(together, reversed_, atol=1e-5)
    np.testing.assert_array_equal(local.embed(texts), together)


def test_local_ranks_the_paraphrase_first(local: LocalEmbedder) -> None:
    questions = local.embed([question for question, _ in PARAPHRASES])
    memories = local.embed([memory for _, memory in PARAPHRASES])
    scores = questions @ memories.T
    assert list(scores.argmax(axis=1)) == list(range(len(PARAPHRASES)))


def test_local_is_shared_safely_by_threads(local: LocalEmbedder) -> None:
    texts = [memory for _, memory in PARAPHRASES] * 4
    expected = local.embed(texts)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda text: local.embed([text])[0], texts))
    np.testing.assert_allclose(np.vstack(results), expected, atol=1e-5)


def test_integer_products_keep_the_float_model_s_answers(
    local: LocalEmbedder, tmp_path: Path
) -> None:
    """The derived model runs every weight product on integer kernels, is the same bytes each
    time, is cached, and embeds within a cosine of 0.99 of the packaged float-product model."""
    derived = derive(_weights())
    assert derived == derive(_weights())  # deterministic
    import onnx

    ops = Counter(node.op_type for node in onnx.load_from_string(derived).graph.node)
    # Per layer: the attention's 4 projections and the first feed-forward layer, the second;
    # only the attention's two products of activations stay in float.
    assert (ops["DynamicQuantizeMatMul"], ops["MatMulNBits"], ops["MatMul"]) == (30, 6, 12)
    assert derived_model(_weights(), WEIGHTS_SHA256, tmp_path) == derived  # derived, then kept
    (cached,) = tmp_path.iterdir()
    assert derived_model(_weights(), WEIGHTS_SHA256, tmp_path) == str(cached)
    assert cached.read_bytes() == derived
    cached.write_bytes(derived[:-1] + b"\0")  # changed in the cache: never run, derived again
    assert derived_model(_weights(), WEIGHTS_SHA256, tmp_path) == derived
    assert cached.read_bytes() == derived
    texts = [text for pair in PARAPHRASES for text in pair] + ["a much longer text " * 20]
    floats = LocalEmbedder(threads=1)
    floats._session = _session(_weights(), 1)  # the packaged file: float32 products
    cosines = (floats.embed(texts) * local.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.99, cosines


def test_a_model_derived_in_other_bytes_is_kept_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where this machine's onnx writes the derived model in bytes other than the measured ones,
    the file is still kept (with its digest beside it) and the next start loads it instead of
    deriving it again; a kept file changed afterwards is never run."""
    derived = derive(_weights())
    monkeypatch.setattr(integer, "DERIVED_SHA256", "0" * 64)  # as under another onnx version
    assert derived_model(_weights(), WEIGHTS_SHA256, tmp_path) == derived
    kept = next(path for path in tmp_path.iterdir() if path.suffix == ".onnx")

    def derive_again(_source: Path) -> bytes:
        raise AssertionError("derived again although a good copy was kept")

    with monkeypatch.context() as patch:
        patch.setattr(integer, "derive", derive_again)
        assert derived_model(_weights(), WEIGHTS_SHA256, tmp_path) == str(kept)
    kept.write_bytes(derived[:-1] + b"\0")
    assert derived_model(_weights(), WEIGHTS_SHA256, tmp_path) == derived
    assert kept.read_bytes() == derived


def _cpu_ticks_of_other_threads(embedder: LocalEmbedder, texts: list[str]) -> int:
    """CPU clock ticks the process's other threads spent while this thread embedded `texts`."""
    tasks, me = Path("/proc/self/task"), str(threading.get_native_id())

    def ticks() -> dict[str, int]:
        found = {}
        for tid in os.listdir(tasks):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                fields = (tasks / tid / "stat").read_text().rsplit(")", 1)[1].split()
                found[tid] = int(fields[11]) + int(fields[12])  # utime + stime
        return found

    before = ticks()
    embedder.embed(texts)
    after = ticks()
    return sum(n - before.get(tid, 0) for tid, n in after.items() if tid != me)


def test_the_worker_s_embedder_runs_on_the_calling_thread_only(local: LocalEmbedder) -> None:
    """The embedding worker's model does all its work on the calling (niced) thread; the
    requests' two-thread model, which the worker shared before, works on a pool thread too."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs Linux /proc")
    single = worker_embedder(local)()
    assert single is worker_embedder(local)() and single is not local  # built once
    np.testing.assert_allclose(single.embed(["aisle"]), local.embed(["aisle"]), atol=1e-5)
    texts = [f"{memory} ({i})" for i in range(12) for _, memory in PARAPHRASES]
    assert _cpu_ticks_of_other_threads(single, texts) <= 2
    assert _cpu_ticks_of_other_threads(local, texts) > 2


def test_by_default_a_query_is_embedded_on_its_request_s_thread_alone(tmp_path: Path) -> None:
    """A query is one short model run: on this machine one thread embeds it faster than two,
    at every load measured (bench/results/2026-12-04/threads7/). So by default the requests'
    session uses none of onnxruntime's pool threads, and the worker shares that session (its
    runs stay on its niced thread): one session per process, not two."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs Linux /proc")
    embedder = embedder_from_settings(Settings(embedder_cache_dir=tmp_path))
    assert isinstance(embedder, LocalEmbedder)
    assert worker_embedder(embedder)() is embedder
    texts = [f"{question} ({i})" for i in range(12) for question, _ in PARAPHRASES]
    assert _cpu_ticks_of_other_threads(embedder, texts) <= 2


def test_local_starts_without_the_network(tmp_path: Path) -> None:
    """In a fresh interpreter whose sockets refuse to connect, with nothing cached yet, the
    model is derived, loads and embeds."""
    code = """
import socket
def refuse(*args, **kwargs):
    raise OSError("network used: " + repr(args))
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.getaddrinfo = refuse
socket.create_connection = refuse
from mnemos.embedding import load_embedder
print(load_embedder("local").embed(["offline"]).shape)
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 384)"


def test_none_means_no_embedder() -> None:
    assert load_embedder("none") is None
    assert load_embedder(" NONE ") is None
    assert embedder_from_settings(Settings(embedder="none")) is None


def test_unknown_embedder_spec_is_refused() -> None:
    with pytest.raises(ValidationError, match="'local', 'none' or the http"):
        Settings(embedder="sentence-transformers")
    with pytest.raises(ValueError, match="Unknown embedder"):
        load_embedder("ftp://example.invalid")
    assert Settings().embedder == "local"
    assert Settings(embedder="Local").embedder == "local"


def test_endpoint_url_forms() -> None:
    assert endpoint_url("http://h:1") == "http://h:1/v1/embeddings"
    assert endpoint_url("http://h:1/v1") == "http://h:1/v1/embeddings"
    assert endpoint_url("https://h/api/v1/embeddings/") == "https://h/api/v1/embeddings"


# --- An OpenAI-compatible server on loopback ------------------------------------------------

Answer = Callable[[dict[str, Any]], tuple[int, bytes]]


class EmbeddingsServer:
    """A tiny `/v1/embeddings` server: `answer` decides what each request gets."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.answer: Answer = good_answer
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server API)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((self.path, dict(self.headers), body))
                status, payload = server.answer(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def vector_for(text: str, dims: int = 8) -> list[float]:
    """A deterministic, not normalised vector per text."""
    seed = sum(text.encode()) + len(text)
    return [float((seed * (i + 3)) % 17 + 1) for i in range(dims)]


def good_answer(body: dict[str, Any], dims: int = 8) -> tuple[int, bytes]:
    items = [
        {"object": "embedding", "index": i, "embedding": vector_for(text, dims)}
        for i, text in enumerate(body["input"])
    ]
    items.reverse()  # servers may answer out of order: `index` says which is which
    return 200, json.dumps({"object": "list", "data": items, "model": body["model"]}).encode()


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    running = EmbeddingsServer()
    yield running
    running.close()


def test_endpoint_embeds_in_order_normalised_with_model_and_key(server: EmbeddingsServer) -> None:
    settings = Settings(
        embedder=server.url, embedder_model="nomic-embed-text", embedder_api_key="sk-test"
    )
    embedder = embedder_from_settings(settings)
    assert isinstance(embedder, EndpointEmbedder)
    assert embedder.dimensions == 8  # asked once at startup
    assert embedder.model == "nomic-embed-text@8"  # what its vectors record: name and size
    texts = [f"text number {i}" for i in range(150)]
    vectors = embedder.embed(texts)
    assert vectors.shape == (150, 8) and vectors.dtype == np.float32
    expected = np.array([vector_for(text) for text in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, rtol=1e-6)
    path, headers, body = server.requests[-1]
    assert path == "/v1/embeddings"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "nomic-embed-text"
    assert len(server.requests) == 1 + 3  # the startup probe, then batches of at most 64
    assert embedder.embed([]).shape == (0, 8)


def test_endpoint_with_known_dimensions_is_not_asked_at_startup(server: EmbeddingsServer) -> None:
    embedder = load_embedder(server.url + "/v1", model="m", dimensions=8)
    assert embedder is not None and server.requests == []
    assert embedder.embed(["a"]).shape == (1, 8)
    assert "Authorization" not in server.requests[0][1]


def test_endpoint_needs_a_model_name(server: EmbeddingsServer) -> None:
    with pytest.raises(ValueError, match="MNEMOS_EMBEDDER_MODEL"):
        load_embedder(server.url)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda _body: (500, b'{"error": "model crashed"}'), "answered HTTP 500"),
        (lambda _body: (401, b'{"error": "bad key"}'), "answered HTTP 401"),
        (lambda _body: (200, b"<html>not json</html>"), "not an embeddings list"),
        (lambda _body: (200, b'{"data": "nope"}'), "not an embeddings list"),
        (lambda _body: (200, b'{"data": [{"embedding": ["x"]}]}'), "not an embeddings list"),
        (lambda _body: (200, b'{"data": []}'), "answered 0 vectors for 2 texts"),
        (lambda body: good_answer(body, dims=4), "4 dimensions, expected 8"),
        (
            lambda _body: (
                200,
                b'{"data": [{"index": 0, "embedding": [0, 0]}, {"index": 1, "embedding": [1, 0]}]}',
            ),
            "zero or not finite",
        ),
        (
            lambda _body: (
                200,
                b'{"data": [{"index": 0, "embedding": [1, 2]}, {"index": 1, "embedding": [1]}]}',
            ),
            "differing",
        ),
    ],
)
def test_endpoint_failures_are_clear_errors(
    server: EmbeddingsServer, answer: Answer, message: str
) -> None:
    embedder = load_embedder(server.url, model="m")
    assert embedder is not None and embedder.dimensions == 8
    server.answer = answer
    with pytest.raises(EmbedderUnavailable, match=message) as caught:
        embedder.embed(["one", "two"])
    assert caught.value.status == 503 and caught.value.code == "embedder_unavailable"
    assert server.url not in caught.value.message  # the address is logged, not shown


def test_unreachable_endpoint_fails_at_startup(server: EmbeddingsServer) -> None:
    url = server.url
    server.close()
    with pytest.raises(EmbedderUnavailable, match="could not be reached"):
        load_embedder(url, model="m", timeout_seconds=5)


# --- The tokenizer, against the Hugging Face `tokenizers` pipeline -----------------------------

# Characters from Unicode versions both sides classify alike: letters with and without accents,
# Greek, Cyrillic, CJK, kana, Hangul, emoji, punctuation and symbols, every kind of whitespace and
# control character the normaliser treats specially, combining marks.
ALPHABET = (
    string.ascii_letters
    + string.digits
    + string.punctuation
    + "àéîõüçñßøÆŒİıſﬁΣσςΑΩЖжЯя東京中文日本語ひらがなカタカナ한국어"
    + "😀🙂👍🏽✓€£¥§°±×÷…—–‘’“”«»¿¡"
    + " \t\n\r\x0b\x0c\x1c\x85\u00a0\u2002\u2009\u2028\u3000\u200b\u200d\ufeff\x00\ufffd"
    + "\u0301\u0308\u0327\u0338"
)


@pytest.fixture(scope="module")
def reference_tokenizer() -> Any:
    """`tokenizers` configured as all-MiniLM-L6-v2's tokenizer.json, over the same vocabulary."""
    from importlib import resources

    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece as HfWordPiece

    text = resources.files("mnemos.embedding").joinpath("vocab.txt").read_text("utf-8")
    vocab = {token: i for i, token in enumerate(text.splitlines())}
    tokenizer = Tokenizer(HfWordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 101), ("[SEP]", 102)]
    )
    tokenizer.enable_truncation(max_length=256)
    return tokenizer


@pytest.fixture(scope="module")
def wordpiece() -> WordPiece:
    return WordPiece.bundled(256)


def test_tokenizer_matches_on_the_recall_set(
    reference_tokenizer: Any, wordpiece: WordPiece
) -> None:
    lines = (Path(__file__).parents[1] / "bench/recall/pairs.jsonl").read_text().splitlines()
    texts = [text for line in lines for text in json.loads(line).values()]
    texts += ["Ünïcödé 東京 🙂", "a" * 101 + " b", "word " * 600, "x\u200by", "ΣΊΣΥΦΟΣ İstanbul"]
    for text in texts:
        assert wordpiece.encode(text) == reference_tokenizer.encode(text).ids, text


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(ALPHABET), max_size=300))
def test_tokenizer_matches_on_any_text(
    reference_tokenizer: Any, wordpiece: WordPiece, text: str
) -> None:
    assert wordpiece.encode(text) == reference_tokenizer.encode(text).ids


@settings(max_examples=30, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(["ab ", "cd\t", "é", "x" * 120, "\u3000", "\x1c", "-", "東", "\u0301"]),
        min_size=500,
        max_size=3000,
    )
)
def test_tokenizer_matches_on_long_texts(
    reference_tokenizer: Any, wordpiece: WordPiece, parts: list[str]
) -> None:
    """Long texts are normalised a chunk at a time: the cut never changes the tokens."""
    text = "".join(parts)
    assert wordpiece.encode(text) == reference_tokenizer.encode(text).ids
