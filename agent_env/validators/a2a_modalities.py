"""`verify_a2a_modalities`: which inputs the agent takes. Each probe is a message of one media type (text, a PNG
image, a PDF document) asking for a word only its content gives; its fixture is made here, a few hundred bytes,
its file named neutrally (a name must not give the answer away).

Required: a text message and a message of every probed type the card declares in `defaultInputModes` are taken
(a task that completes, no JSON-RPC error). The answer naming the probe's word is evidence the agent read the
content: optional (an agent without a model cannot), so it shows in the report and the score without failing it.
"""

from __future__ import annotations

import base64
import struct
import zlib
from dataclasses import dataclass

import httpx

from agent_env.validators.a2a_wire import AgentUnanswered, fetch_card, file_part, send, text_part
from agent_env.validators.report import Finding, ValidationReport

VALIDATOR = "verify_a2a_modalities"


def red_png(side: int = 8) -> bytes:
    """A `side`×`side` solid red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * side for _ in range(side))
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pdf_with(text: str) -> bytes:
    """A one-page PDF showing `text` (ASCII), its cross-reference table computed."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, table)
    return bytes(out)


@dataclass(frozen=True)
class Probe:
    media_type: str
    prompt: str
    expected: str  # the word only the content gives (compared case-insensitively)
    fixture: bytes | None = None  # sent as a file part of `media_type`
    filename: str = ""


PROBES = (
    Probe("text/plain", "Reply with exactly the word PINEAPPLE and nothing else.", "pineapple"),
    Probe(
        "image/png",
        "What is the dominant color of the attached image? Answer in one word.",
        "red",
        red_png(),
        "image.png",
    ),
    Probe(
        "application/pdf",
        "A PDF document is attached. Reply with only the target word it names.",
        "elephant",
        pdf_with("The target word is: ELEPHANT. Reply with only that word."),
        "document.pdf",
    ),
)


def declares(modes: object, media_type: str) -> bool:
    """The card's input modes name `media_type` (exactly, by `type/*`, `*/*`, or the legacy kinds)."""
    if not isinstance(modes, list):
        return False
    family = media_type.split("/")[0]
    legacy = "text" if family == "text" else "file"
    return any(m in (media_type, f"{family}/*", "*/*", legacy) for m in modes)


async def verify_modalities(http: httpx.AsyncClient, url: str, deadline_s: float = 60) -> ValidationReport:
    report = ValidationReport(validator=VALIDATOR, target=url)
    try:
        agent = await fetch_card(http, url)
    except AgentUnanswered as e:
        report.checks.append(Finding.failed("modalities.card", str(e), "serve the agent card"))
        return report
    if not agent.rpc_url:
        report.checks.append(
            Finding.failed("modalities.interface", "; ".join(agent.problems), "name a JSON-RPC interface in the card")
        )
        return report
    modes = agent.card.get("defaultInputModes")
    for probe in PROBES:
        declared = probe.fixture is None or declares(modes, probe.media_type)
        parts = [text_part(agent, probe.prompt)]
        if probe.fixture is not None:
            encoded = base64.b64encode(probe.fixture).decode()
            parts.append(file_part(agent, encoded, probe.media_type, probe.filename))
        try:
            sent = await send(http, agent, parts, deadline_s)
            outcome = (
                f"error {sent.error}" if sent.error is not None else sent.note or f"a {sent.state or 'stateless'} task"
            )
            taken = sent.error is None and not sent.note and sent.state in ("completed", "input_required")
        except AgentUnanswered as e:
            sent, outcome, taken = None, str(e), False
        check = f"modalities.{probe.media_type}"
        why = "declared in defaultInputModes" if probe.fixture is not None else "every A2A agent takes text"
        report.checks.append(
            Finding.ok(f"{check}.taken", required=declared)
            if taken
            else Finding.failed(
                f"{check}.taken",
                f"a message with {probe.media_type} ({why if declared else 'not declared'}) was answered with "
                f"{outcome[:200]}",
                f"take {probe.media_type} parts"
                + ("" if probe.fixture is None else f", or drop {probe.media_type} from defaultInputModes"),
                required=declared,
            )
        )
        if taken and sent is not None:
            read = probe.expected in sent.text.lower()
            report.checks.append(
                Finding.ok(f"{check}.read", required=False)
                if read
                else Finding.failed(
                    f"{check}.read",
                    f"the answer {sent.text[:120]!r} does not name {probe.expected!r}: no sign the content was read",
                    f"give {probe.media_type} content to a model that reads it",
                    required=False,
                )
            )
    return report
