#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets: a few valid inputs and the edge cases next to
each check of the decoders. Run from the repository root after a wire format change:
    python3 tests/fuzz/make_seed_corpus.py
The layouts are those of transport/tcp/handshake.h, wire_format.h and
core/security/auth_exchange.h (little-endian).
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def hello(stream_index=0, stream_count=1, version=1, reserved=0, magic=b"CHORUSTC"):
    # magic, version, reserved u16, stream index, job, target mesh, source mesh,
    # source rank, target rank, stream count, reserved u32, dial id
    return magic + struct.pack("<HHIQQQIIIIQ", version, reserved, stream_index, 0x1234,
                               0xabcdef, 0xfedcba, 0, 1, stream_count, 0, 42)


def reply(verdict=0):
    return b"CHORUSOK" + struct.pack("<HHI", 1, verdict, 0)


def offer(version=1, reserved=b"\0" * 6):
    return b"CHORUSOF" + struct.pack("<H", version) + reserved


def challenge(flags=1, nonce=b"\x11" * 16):
    return b"CHORUSCH" + struct.pack("<HHI", 1, flags, 0) + nonce


def response(flags=1, proof=b"\x22" * 32):
    return b"CHORUSAR" + struct.pack("<HHI", 1, flags, 0) + b"\x33" * 16 + proof


def verdict(code=0, flags=1, proof=b"\x44" * 32):
    return b"CHORUSAV" + struct.pack("<HHI", 1, code, flags) + proof


def frame(kind=1, reserved=0, seq=7, tag=3, total=4096, offset=0, length=4096):
    return struct.pack("<IIQQQQQ", kind, reserved, seq, tag, total, offset, length)


def limit(max_message_bytes):
    """The frame fuzzer's optional trailer: the receiver's CHORUS_TCP_MAX_MESSAGE."""
    return struct.pack("<Q", max_message_bytes)


CORPORA = {
    "handshake_fuzzer": {
        "hello_first_stream": hello(),
        "hello_last_of_64_streams": hello(stream_index=63, stream_count=64),
        "hello_65_streams": hello(stream_index=0, stream_count=65),
        "hello_zero_streams": hello(stream_count=0),
        "hello_index_past_count": hello(stream_index=2, stream_count=2),
        "hello_version_2": hello(version=2),
        "hello_reserved_set": hello(reserved=1),
        "hello_bad_magic": hello(magic=b"CHORUSTX"),
        "hello_truncated": hello()[:20],
        "hello_then_frame": hello() + frame(),
        "auth_offer": offer(),
        "auth_offer_reserved_set": offer(reserved=b"\0\0\0\0\0\1"),
        "auth_offer_then_unproven_response": offer() + response(flags=0, proof=b"\0" * 32),
        "auth_offer_then_proven_response": offer() + response(),
        "auth_response_unannounced_proof": offer() + response(flags=0),
        "auth_challenge": challenge(),
        "auth_challenge_requires_tls": challenge(flags=2),
        "auth_challenge_then_verdict": challenge() + verdict(),
        "auth_challenge_then_unproven_verdict": challenge(flags=0) + verdict(flags=0,
                                                                              proof=b"\0" * 32),
        "auth_verdict_refused": verdict(code=2),
        "auth_verdict_unknown": verdict(code=9),
        "tls_client_hello_start": bytes([22, 3, 1, 0, 200]) + b"\0" * 11,
        "reply_accepted": reply(),
        "reply_unknown_verdict": reply(verdict=9),
        "endpoint_ipv4": b"127.0.0.1:40123;mesh=00ab12cd34ef5678",
        "endpoint_ipv6_nested_field": b"[::1]:1;mesh=zz;mesh=ffffffffffffffff",
        "endpoint_no_address": b";mesh=1",
        "empty": b"",
    },
    "frame_header_fuzzer": {
        "start": frame(),
        "chunk": frame(kind=2, tag=0, total=1 << 20, offset=4096, length=8192),
        "chunk_with_tag": frame(kind=2, tag=1, offset=0),
        "start_at_offset": frame(offset=1, length=1),
        "length_overflows_offset": frame(kind=2, tag=0, total=1 << 20, offset=(1 << 64) - 1,
                                         length=2),
        "past_message_end": frame(total=10, length=11),
        "unknown_kind": frame(kind=3),
        "reserved_set": frame(reserved=1),
        "truncated": frame()[:47],
        "total_at_limit": frame() + limit(4096),
        "total_above_limit": frame() + limit(4095),
        "empty_message_zero_limit": frame(total=0, length=0) + limit(0),
    },
}


def main():
    for target, inputs in CORPORA.items():
        directory = os.path.join(ROOT, target)
        os.makedirs(directory, exist_ok=True)
        for name, data in inputs.items():
            with open(os.path.join(directory, name), "wb") as handle:
                handle.write(data)


if __name__ == "__main__":
    main()
