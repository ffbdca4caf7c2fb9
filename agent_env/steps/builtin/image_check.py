"""`check_image`: is a file an agent made a real image of the size asked for, and not blank?

An agent that renders, plots or screenshots hands back a file; a grader must not trust its word that the file
is a picture. This step reads the file from the object store (e.g. what `collect_files` brought out of a
sandbox), decodes the PNG with the standard library (chunks and CRCs, IHDR for the size, zlib, the scanline
filters) and counts distinct colours: one colour is a blank frame. The file comes from the agent, so what it
reads is bounded before any work: its bytes, its pixels, what zlib may inflate to.

Its score is all or nothing (1.0 or 0.0); each row says what held and, if not, why.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from dataclasses import dataclass

from pydantic import Field

from agent_env.errors import AgentEnvError
from agent_env.spec.run import Criterion, Score
from agent_env.steps import StepConfig, StepContext, StepFailed, StepResult, step_type

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel
DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
COLOUR_CAP = 4096  # counting stops here: enough to tell a picture from a blank


class NotAnImage(ValueError):
    """The bytes are not a PNG this step can read; the message says why."""


@dataclass(frozen=True)
class Png:
    width: int
    height: int
    colours: int  # distinct pixel values, counted up to COLOUR_CAP


def read_png(data: bytes, *, max_pixels: int) -> Png:
    """Size and distinct colours of a PNG (NotAnImage if it is none, is damaged or too big)."""
    if not data.startswith(SIGNATURE):
        raise NotAnImage("not a PNG (its first bytes are not the PNG signature)")
    chunks = _chunks(data)
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise NotAnImage("a PNG must start with its IHDR chunk")
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if width == 0 or height == 0 or depth not in DEPTHS.get(colour, ()) or compression or filtering:
        raise NotAnImage(f"IHDR is invalid ({width}x{height}, bit depth {depth}, colour type {colour})")
    if width * height > max_pixels:
        raise NotAnImage(f"{width}x{height} is more than max_pixels ({max_pixels}): raise it")
    if interlace:
        raise NotAnImage("an interlaced (Adam7) PNG: save it without interlacing")
    palette = b"".join(body for kind, body in chunks if kind == b"PLTE")
    if colour == 3 and not palette:
        raise NotAnImage("a palette PNG without its PLTE chunk")
    pixel_bits = CHANNELS[colour] * depth
    stride = (width * pixel_bits + 7) // 8
    raw = _inflate(b"".join(body for kind, body in chunks if kind == b"IDAT"), height * (stride + 1))
    rows = _unfilter(raw, height, stride, max(1, pixel_bits // 8))
    return Png(width, height, _colours(rows, width, pixel_bits, palette if colour == 3 else None))


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, at = [], len(SIGNATURE)
    while at < len(data):
        if at + 12 > len(data):
            raise NotAnImage("the PNG is cut short inside a chunk header")
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if len(body) != length or at + 12 + length > len(data):
            raise NotAnImage(f"the PNG is cut short inside its {kind.decode('latin-1')!r} chunk")
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        if zlib.crc32(kind + body) != crc:
            raise NotAnImage(f"the {kind.decode('latin-1')!r} chunk is damaged (its CRC does not match)")
        chunks.append((kind, body))
        at += 12 + length
        if kind == b"IEND":
            return chunks
    raise NotAnImage("the PNG has no IEND chunk: it is cut short")


def _inflate(compressed: bytes, size: int) -> bytes:
    """Exactly the `size` bytes the header promises; never more (a small file cannot inflate to gigabytes)."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(compressed, size)
    except zlib.error as e:
        raise NotAnImage(f"the image data does not inflate: {e}") from None
    if len(raw) < size:
        raise NotAnImage(f"the image data holds {len(raw)} bytes; its size needs {size}")
    return raw


def _unfilter(raw: bytes, height: int, stride: int, bpp: int) -> list[bytes]:
    """The scanlines with their filters undone (PNG spec, section 9)."""
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = previous[i], previous[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        elif kind != 0:
            raise NotAnImage(f"scanline {y} has an unknown filter type {kind}")
        rows.append(bytes(line))
        previous = line
    return rows


def _colours(rows: list[bytes], width: int, pixel_bits: int, palette: bytes | None) -> int:
    seen: set[bytes | int] = set()
    for row in rows:
        if pixel_bits >= 8:
            step = pixel_bits // 8
            seen.update(row[i : i + step] for i in range(0, width * step, step))
        else:
            per_byte, mask = 8 // pixel_bits, (1 << pixel_bits) - 1
            values = ((row[x // per_byte] >> (8 - pixel_bits * (x % per_byte + 1))) & mask for x in range(width))
            seen.update(values)
        if len(seen) >= COLOUR_CAP:
            return COLOUR_CAP
    if palette is not None:  # indices that name the same colour are one colour
        indices = (v if isinstance(v, int) else v[0] for v in seen)
        return len({palette[3 * i : 3 * i + 3] for i in indices})
    return len(seen)


class CheckImageConfig(StepConfig):
    image: str = Field(description="the object key of the file, e.g. ${steps.collect.outputs.files.0.key}")
    width: int | None = Field(None, gt=0, description="the width it must have, in pixels")
    height: int | None = Field(None, gt=0, description="the height it must have, in pixels")
    min_colours: int = Field(
        8, ge=1, le=COLOUR_CAP, description="distinct colours it must have at least (a blank frame has 1)"
    )
    max_bytes: int = Field(16 * 1024 * 1024, gt=0, le=256 * 1024 * 1024, description="the largest file it reads")
    max_pixels: int = Field(4096 * 4096, gt=0, le=64 * 1024 * 1024, description="the most pixels it decodes")


def grade(data: bytes, config: CheckImageConfig) -> Score:
    """All or nothing: 1.0 when every row holds, else 0.0; each row says why."""
    if len(data) > config.max_bytes:
        reason = f"the file is {len(data)} bytes, more than max_bytes ({config.max_bytes})"
        return Score(value=0.0, criteria=[Criterion(name="a PNG", passed=False, detail=reason)])
    try:
        png = read_png(data, max_pixels=config.max_pixels)
    except NotAnImage as e:
        return Score(value=0.0, criteria=[Criterion(name="a PNG", passed=False, detail=str(e))])
    wanted = f"{config.width or png.width}x{config.height or png.height}"
    criteria = [
        Criterion(name="a PNG", passed=True, detail=f"{png.width}x{png.height}"),
        Criterion(
            name=f"of size {wanted}",
            passed=wanted == f"{png.width}x{png.height}",
            detail=f"it is {png.width}x{png.height}",
        ),
        Criterion(
            name="not blank",
            passed=png.colours >= config.min_colours,
            detail=f"{png.colours}{'+' if png.colours == COLOUR_CAP else ''} distinct colours "
            f"(at least {config.min_colours} wanted)",
        ),
    ]
    return Score(value=1.0 if all(c.passed for c in criteria) else 0.0, criteria=criteria)


@step_type("check_image", config=CheckImageConfig, timeout="2m")
async def check_image(ctx: StepContext, config: CheckImageConfig) -> StepResult:
    """Check that a file is a real PNG of the requested size and not blank; scores 1.0 or 0.0, with reasons."""
    try:
        data = await asyncio.to_thread(ctx.stores.objects.get, config.image)
    except AgentEnvError as e:
        raise StepFailed(f"no file at {config.image!r} in the object store: {e}") from None
    score = await asyncio.to_thread(grade, data, config)  # decoding is CPU work: off the worker's loop
    return StepResult(outputs={"size": len(data), "criteria": [c.model_dump() for c in score.criteria]}, score=score)
