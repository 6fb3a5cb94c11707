"""Golden files: tests/golden/NAME.yaml -> NAME.injected.yaml through the full review path.

Regenerate after an intended change with `pytest tests/unit/test_core_golden.py --update-golden`
and read the diff: it is the user-visible change. A `# settings: {json}` line in the input sets
Settings fields for that case.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.core_helpers import admission_review, mutator, settings_with, validate_pod
from webhook.admission.review import decode_patch
from webhook.inject.patch import apply_patch

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CASES = sorted(p for p in GOLDEN.glob("*.yaml") if not p.name.endswith(".injected.yaml"))


def _settings_header(text: str) -> dict[str, Any]:
    for line in text.splitlines():
        if line.startswith("# settings:"):
            loaded: dict[str, Any] = json.loads(line.removeprefix("# settings:"))
            return loaded
    return {}


def render(case: Path) -> str:
    text = case.read_text()
    pod = yaml.safe_load(text)
    review = mutator(settings_with(**_settings_header(text))).review(admission_review(pod))
    response = review["response"]
    result = apply_patch(pod, decode_patch(review))
    header = [f"# generated from {case.name} by tests/unit/test_core_golden.py --update-golden"]
    header.append(f"# allowed: {str(response['allowed']).lower()}")
    audit = response.get("auditAnnotations", {})
    header.append(f"# decision: {audit.get('decision')} ({audit.get('reason')})")
    header += [f"# warning: {w}" for w in response.get("warnings", [])]
    return "\n".join(header) + "\n" + yaml.safe_dump(result, sort_keys=False)


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_golden(case: Path, update_golden: bool) -> None:
    expected_file = case.with_name(case.stem + ".injected.yaml")
    actual = render(case)
    if update_golden or not expected_file.exists():
        expected_file.write_text(actual)
        if not update_golden:
            pytest.fail(f"{expected_file.name} did not exist; written now - review and commit it")
    assert actual == expected_file.read_text(), (
        f"injection output changed for {case.name}; if intended, rerun with --update-golden"
    )
    validate_pod(yaml.safe_load(actual))


def test_every_golden_has_output() -> None:
    outputs = {p.name for p in GOLDEN.glob("*.injected.yaml")}
    assert outputs == {c.stem + ".injected.yaml" for c in CASES}
