"""Kubernetes resource quantities ("500m", "4Gi", "5G", "1e3") as exact fractions."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
# apimachinery v0.31 resource.ParseQuantity: a number, then one suffix: binary SI, decimal SI,
# or a decimal exponent, never an exponent and a unit together ("1e3Gi" is refused).
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei))?$")


def parse(value) -> Fraction:
    if isinstance(value, bool):
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    if isinstance(value, (int, float)):
        return Fraction(value)
    m = _RE.match(str(value).strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {value!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        number *= Fraction(10) ** int(m.group(2))
    return number * _SUFFIX[m.group(3) or ""]


def fmt(resource: str, value: Fraction) -> str:
    """Format as Kueue prints usage: cpu in cores or millicores, memory in binary units."""
    if resource == "memory" or resource.endswith("storage"):
        for suffix in ("Ti", "Gi", "Mi", "T", "G", "M", "Ki", "k"):
            unit = _SUFFIX[suffix]
            if value % unit == 0 and value >= unit:
                return f"{int(value / unit)}{suffix}"
        return str(int(value)) if value.denominator == 1 else str(float(value))
    if value.denominator == 1:
        return str(int(value))
    milli = value * 1000
    return f"{int(milli)}m" if milli.denominator == 1 else str(float(value))
