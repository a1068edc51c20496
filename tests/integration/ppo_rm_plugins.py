"""The hidden rule of the preference tests as a verifier: a response in capitals is better."""


def capitals(sample, **_) -> float:
    """1.0 when most letters of the response are capitals, else 0.0."""
    letters = [c for c in sample.response if c.isalpha()]
    return float(bool(letters) and sum(c.isupper() for c in letters) > len(letters) / 2)
