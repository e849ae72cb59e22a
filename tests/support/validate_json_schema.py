#!/usr/bin/env python3
"""Checks generated texts against their JSON Schemas, independently of kvad's grammar code.

Input: a JSON Lines file of {"schema": ..., "text": ...} (or {"gbnf_regex": ..., "text": ...}).
Output: one line per input, "ok" or "FAIL: why". Parsing is Python's json (strict: no control
characters in strings, no NaN); validation is the jsonschema package, with the string formats
kvad constrains checked here (the package skips formats whose optional checkers are missing).
"""
import datetime
import json
import re
import sys
import uuid

import jsonschema

checker = jsonschema.FormatChecker()
TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))$")


def no_constant(name):
    raise ValueError(name)


@checker.checks("date", raises=ValueError)
def is_date(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
        return False
    datetime.date.fromisoformat(s)  # raises on 2023-02-29, month 13, year 0
    return True


@checker.checks("time")
def is_time(s):
    if not isinstance(s, str):
        return True
    m = TIME.fullmatch(s)
    if not m:
        return False
    hh, mm, ss = int(m.group(1)), int(m.group(2)), int(m.group(3))
    ok = hh < 24 and mm < 60 and ss < 60
    if m.group(6):
        ok = ok and int(m.group(6)) < 24 and int(m.group(7)) < 60
    return ok


@checker.checks("date-time", raises=ValueError)
def is_date_time(s):
    if not isinstance(s, str):
        return True
    if "T" not in s:
        return False
    d, t = s.split("T", 1)
    return is_date(d) and is_time(t)


@checker.checks("uuid", raises=ValueError)
def is_uuid(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s):
        return False
    uuid.UUID(s)
    return True


def check(entry):
    text = entry["text"]
    if "gbnf_regex" in entry:
        return "ok" if re.fullmatch(entry["gbnf_regex"], text, re.S) else "FAIL: does not match the regex"
    try:
        value = json.loads(text, parse_constant=no_constant)
    except ValueError as e:
        return f"FAIL: not JSON ({e})"
    try:
        jsonschema.validate(value, entry["schema"], format_checker=checker)
    except jsonschema.ValidationError as e:
        return f"FAIL: {e.message}"
    return "ok"


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                print(check(json.loads(line)))


if __name__ == "__main__":
    main()
