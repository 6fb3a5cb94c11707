"""Shape checks for what an AdmissionReview carries: the request envelope and the Pod in it.

The apiserver decodes a Pod into its Go types before calling webhooks, so what it sends always
has these shapes; anything else comes from a client talking to the webhook directly or from a
manifest given to offline `inject`. Either way the answer must name the field that is wrong
instead of failing somewhere deep in the injection with a traceback. Only the fields the webhook
reads or writes (and a container's obvious ones) are checked; JSON null counts as absent for an
object's field, as in the Kubernetes API, but not as a list item or a map value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# A shape is one of these names, ("list", item shape), ("map", value shape), or a dict of field
# shapes (an object whose other fields are not checked).
Shape = str | tuple[str, Any] | Mapping[str, Any]

STRING: Final = "string"
BOOLEAN: Final = "boolean"
INTEGER: Final = "integer"
OBJECT: Final = "object"  # any object


def list_of(item: Shape) -> tuple[str, Shape]:
    return ("list", item)


def map_of(value: Shape) -> tuple[str, Shape]:
    return ("map", value)


_GVK: Final = {"group": STRING, "version": STRING, "kind": STRING}
_GVR: Final = {"group": STRING, "version": STRING, "resource": STRING}

USER_INFO: Final = {
    "username": STRING,
    "uid": STRING,
    "groups": list_of(STRING),
    "extra": map_of(list_of(STRING)),
}

REQUEST: Final = {
    "uid": STRING,
    "kind": _GVK,
    "resource": _GVR,
    "subResource": STRING,
    "requestKind": _GVK,
    "requestResource": _GVR,
    "requestSubResource": STRING,
    "name": STRING,
    "namespace": STRING,
    "operation": STRING,
    "userInfo": USER_INFO,
    "object": OBJECT,
    "oldObject": OBJECT,
    "dryRun": BOOLEAN,
    "options": OBJECT,
}

# The request's own fields: its objects are judged by what the review is about (a Pod, an
# EphemeralContainers, a Namespace, something not handled).
ENVELOPE: Final = {k: v for k, v in REQUEST.items() if k not in ("object", "oldObject")}

_CONTAINER: Final = {
    "name": STRING,
    "image": STRING,
    "imagePullPolicy": STRING,
    "restartPolicy": STRING,
    "command": list_of(STRING),
    "args": list_of(STRING),
    "workingDir": STRING,
    "targetContainerName": STRING,
    "ports": list_of(
        {
            "name": STRING,
            "containerPort": INTEGER,
            "hostPort": INTEGER,
            "hostIP": STRING,
            "protocol": STRING,
        }
    ),
    "env": list_of({"name": STRING, "value": STRING, "valueFrom": OBJECT}),
    "envFrom": list_of(OBJECT),
    "volumeMounts": list_of(
        {
            "name": STRING,
            "mountPath": STRING,
            "subPath": STRING,
            "subPathExpr": STRING,
            "readOnly": BOOLEAN,
            "mountPropagation": STRING,
        }
    ),
    "volumeDevices": list_of({"name": STRING, "devicePath": STRING}),
    "securityContext": OBJECT,
    "resources": OBJECT,
    "lifecycle": OBJECT,
    "livenessProbe": OBJECT,
    "readinessProbe": OBJECT,
    "startupProbe": OBJECT,
    "stdin": BOOLEAN,
    "tty": BOOLEAN,
}

POD: Final = {
    "apiVersion": STRING,
    "kind": STRING,
    "metadata": {
        "name": STRING,
        "generateName": STRING,
        "namespace": STRING,
        "labels": map_of(STRING),
        "annotations": map_of(STRING),
        "ownerReferences": list_of(OBJECT),
    },
    "spec": {
        "containers": list_of(_CONTAINER),
        "initContainers": list_of(_CONTAINER),
        "ephemeralContainers": list_of(_CONTAINER),
        "volumes": list_of(
            {
                "name": STRING,
                "hostPath": {"path": STRING, "type": STRING},
                "emptyDir": OBJECT,
            }
        ),
        "serviceAccountName": STRING,
        "serviceAccount": STRING,
        "restartPolicy": STRING,
        "nodeName": STRING,
        "shareProcessNamespace": BOOLEAN,
        "hostPID": BOOLEAN,
        "hostIPC": BOOLEAN,
        "hostNetwork": BOOLEAN,
        "securityContext": OBJECT,
    },
}

# A Namespace, as far as the namespace-label gate reads it.
NAMESPACE: Final = {
    "apiVersion": STRING,
    "kind": STRING,
    "metadata": {"name": STRING, "labels": map_of(STRING), "annotations": map_of(STRING)},
}

# The `EphemeralContainers` object Kubernetes 1.20-1.21 send for pods/ephemeralcontainers.
EPHEMERAL_CONTAINERS: Final = {
    "apiVersion": STRING,
    "kind": STRING,
    "metadata": POD["metadata"],
    "ephemeralContainers": list_of(_CONTAINER),
}

_ARTICLE: Final = {
    STRING: "a string",
    BOOLEAN: "a boolean",
    INTEGER: "an integer",
    OBJECT: "an object",
    "list": "a list",
    "map": "an object",
}


def type_name(value: Any) -> str:
    """The JSON type of `value`, as a message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def type_name_with_article(value: Any) -> str:
    """`type_name` as a sentence says it: "a string", "an object", "null"."""
    name = type_name(value)
    if name == "null":
        return name
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _key(name: str) -> str:
    """A map key as it appears in a path: `labels.app`, `annotations["a.io/b"]`."""
    shown = name if len(name) <= 63 else name[:60] + "..."
    if shown.isidentifier():
        return f".{shown}"
    escaped = shown.replace("\\", "\\\\").replace('"', '\\"')
    printable = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in escaped)
    return f'["{printable}"]'


def _fits(value: Any, shape: str) -> bool:
    if shape == STRING:
        return isinstance(value, str)
    if shape == BOOLEAN:
        return isinstance(value, bool)
    if shape == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, dict)  # OBJECT


# A path as built while walking: the parent's path and this step (a field name, a list index or
# a map key), formatted only when a problem is found (a large pod has thousands of fields, and
# formatting every map key's path was most of a review's shape check).
Path = tuple[Any, ...] | None


def _format(path: Path) -> str:
    steps: list[str] = []
    while path is not None:
        parent, kind, step = path
        steps.append(
            f"[{step}]" if kind == "index"
            else _key(str(step)) if kind == "key"
            else f".{step}" if parent is not None
            else str(step)
        )
        path = parent
    return "".join(reversed(steps))


def _problem(value: Any, shape: Shape, path: Path) -> str | None:
    """The first way `value` does not fit `shape` (`value` is not None here)."""
    if isinstance(shape, str):
        if _fits(value, shape):
            return None
        return f"{_format(path)} must be {_ARTICLE[shape]}, got {type_name(value)}"
    if isinstance(shape, tuple):
        kind, inner = shape
        if kind == "list":
            if not isinstance(value, list):
                return f"{_format(path)} must be a list, got {type_name(value)}"
            for index, item in enumerate(value):
                found = _item_problem(item, inner, (path, "index", index))
                if found:
                    return found
            return None
        if not isinstance(value, dict):
            return f"{_format(path)} must be an object, got {type_name(value)}"
        for key, item in value.items():
            found = _item_problem(item, inner, (path, "key", key))
            if found:
                return found
        return None
    if not isinstance(value, dict):
        return f"{_format(path)} must be an object, got {type_name(value)}"
    for name, field_shape in shape.items():
        item = value.get(name)
        if item is not None:
            found = _problem(item, field_shape, (path, "field", name))
            if found:
                return found
    return None


def _item_problem(item: Any, shape: Shape, path: Path) -> str | None:
    if item is None:
        kind = shape if isinstance(shape, str) else shape[0] if isinstance(shape, tuple) else OBJECT
        return f"{_format(path)} must be {_ARTICLE[kind]}, got null"
    return _problem(item, shape, path)


def problem(value: Any, shape: Shape, path: str = "") -> str | None:
    """None when `value` has `shape`, else one sentence naming the first field that does not,
    e.g. `spec.containers must be a list, got string`."""
    if value is None:
        return None
    return _problem(value, shape, (None, "root", path) if path else None)
