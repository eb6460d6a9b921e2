#!/usr/bin/env python3
"""List the fields of Harbor's pydantic models from their source, without pydantic.

  python3 tools/harbor_models.py HARBOR_SRC_DIR 'REPO@COMMIT' > spec/fixtures/harbor/models.json

Reads the model files below (Python's own `ast`: the source is parsed, never imported, so
neither pydantic v2 nor Harbor needs to be installed) and prints, for every class that derives
from BaseModel (directly or through another listed class), its fields in order with their
annotation as written, whether they are required, the constraints cseng's checks follow (ge,
min_length) and the model's `extra` policy. spec/results/harbor_models_spec.lua compares this table,
field by field, with the models cseng declares (lua/cseng/evals/atif.lua,
lua/cseng/results/harbor_models.lua), so a field Harbor adds, drops or retypes fails that spec once the
table is regenerated from a newer Harbor.
"""
import ast
import json
import sys
from pathlib import Path

FILES = [
    "models/trajectories/agent.py",
    "models/trajectories/content.py",
    "models/trajectories/final_metrics.py",
    "models/trajectories/metrics.py",
    "models/trajectories/observation.py",
    "models/trajectories/observation_result.py",
    "models/trajectories/step.py",
    "models/trajectories/subagent_trajectory_ref.py",
    "models/trajectories/tool_call.py",
    "models/trajectories/trajectory.py",
    "models/job/result.py",
    "models/job/config.py",
    "models/job/lock.py",
    "models/trial/result.py",
    "models/trial/config.py",
    "models/verifier/result.py",
    "models/agent/context.py",
    "models/agent/rollout_detail.py",
    "models/task/id.py",
    "models/metric/config.py",
    "models/registry.py",
    "models/task/config.py",
]


def unparse(node):
    text = ast.unparse(node)
    # forward references ("Trajectory") read as the type itself
    return text.replace("'", "\u0001").replace('"', "\u0001")


def clean(text):
    # quoted forward references lose their quotes; literal strings keep single quotes
    out, i = [], 0
    parts = text.split("\u0001")
    for k, p in enumerate(parts):
        if k % 2 == 1:
            inner = p
            if inner.isidentifier() and inner[:1].isupper():
                out.append(inner)
            else:
                out.append("'" + inner + "'")
        else:
            out.append(p)
    return "".join(out)


def field_info(value):
    """(required, constraints) of a field's default expression."""
    if value is None:
        return True, {}
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Field":
        cons = {}
        required = False
        if value.args and isinstance(value.args[0], ast.Constant) and value.args[0].value is Ellipsis:
            required = True
        has_default = bool(value.args)
        for kw in value.keywords:
            if kw.arg == "default":
                has_default = True
                if isinstance(kw.value, ast.Constant) and kw.value.value is Ellipsis:
                    required = True
            elif kw.arg == "default_factory":
                has_default = True
            elif kw.arg in ("ge", "min_length", "gt", "le"):
                cons[kw.arg] = ast.literal_eval(kw.value)
        if not has_default:
            required = True
        return required, cons
    return False, {}


def main(src):
    src = Path(src)
    classes = {}
    order = []
    for rel in FILES:
        path = src / rel
        if not path.exists():
            path = src / "src" / "harbor" / rel
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [ast.unparse(b) for b in node.bases]
            fields, extra = [], None
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    name = st.target.id
                    if name.startswith("_") or "ClassVar" in ast.unparse(st.annotation):
                        continue
                    required, cons = field_info(st.value)
                    fields.append((name, clean(unparse(st.annotation)), required, cons))
                elif isinstance(st, ast.Assign) and any(getattr(t, "id", None) == "model_config" for t in st.targets):
                    v = st.value
                    if isinstance(v, ast.Dict):
                        for k, x in zip(v.keys, v.values):
                            if isinstance(k, ast.Constant) and k.value == "extra":
                                extra = x.value
                    elif isinstance(v, ast.Call):
                        for kw in v.keywords:
                            if kw.arg == "extra":
                                extra = kw.value.value
            key = rel + ":" + node.name
            classes[key] = {"name": node.name, "bases": bases, "fields": fields, "extra": extra, "file": rel}
            order.append(key)
    by_name = {}
    for key in order:
        by_name.setdefault(classes[key]["name"], []).append(key)

    def resolved(key, seen=()):
        c = classes[key]
        fields, extra, model = [], None, "BaseModel" in c["bases"]
        for b in c["bases"]:
            for bkey in by_name.get(b, []):
                if bkey in seen:
                    continue
                if classes[bkey]["file"] != c["file"] and len(by_name[b]) > 1:
                    same = [k for k in by_name[b] if classes[k]["file"] == c["file"]]
                    if same and bkey not in same:
                        continue
                bf, bextra, bmodel = resolved(bkey, seen + (key,))
                model = model or bmodel
                names = {f[0] for f in bf}
                fields = [f for f in fields if f[0] not in names] + bf
                extra = extra or bextra
        for f in c["fields"]:
            fields = [x for x in fields if x[0] != f[0]] + [f]
        return fields, c["extra"] or extra, model

    out = {}
    for key in order:
        fields, extra, model = resolved(key)
        if not model:
            continue
        c = classes[key]
        name = c["file"].replace("models/", "").replace(".py", "").replace("/", ".") + "." + c["name"]
        entry = {"extra": extra or "ignore", "fields": {}}
        for f in fields:
            d = {"annotation": f[1], "required": f[2]}
            d.update(f[3])
            entry["fields"][f[0]] = d
        out[name] = entry
    if len(sys.argv) > 2:
        out["_source"] = sys.argv[2]
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
