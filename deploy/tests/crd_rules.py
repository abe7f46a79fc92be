"""The CEL rules of Tollgate's CRDs (x-kubernetes-validations), compiled and run by
cel-python on policies the API server must take and must refuse, as it would run them:
each rule on the object at the schema node it sits on. A rule that does not compile, or
judges a case otherwise than the case says, fails the check.

Run by deploy/check.sh: python crd_rules.py deploy/k8s/crds/tollgate.io_ratelimitpolicies.yaml
"""
import sys

import celpy
import yaml


def rules_at(schema, path=()):
    """(path, rule, message) of every x-kubernetes-validations rule, by schema path; `*`
    stands for an array item or an additionalProperties value."""
    for r in schema.get("x-kubernetes-validations", []):
        yield path, r["rule"], r.get("message", "")
    for k, sub in schema.get("properties", {}).items():
        yield from rules_at(sub, path + (k,))
    if "items" in schema:
        yield from rules_at(schema["items"], path + ("*",))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from rules_at(schema["additionalProperties"], path + ("*",))


def nodes(obj, path):
    """The values at `path` in `obj` (`*`: every item or value)."""
    if not path:
        yield obj
        return
    head, rest = path[0], path[1:]
    if head == "*":
        items = obj if isinstance(obj, list) else list(obj.values()) if isinstance(obj, dict) else []
        for v in items:
            yield from nodes(v, rest)
    elif isinstance(obj, dict) and head in obj:
        yield from nodes(obj[head], rest)


def judge(env, compiled, obj):
    """The messages of the rules `obj` breaks."""
    broken = []
    for path, program, message in compiled:
        for node in nodes(obj, path):
            ok = program.evaluate({"self": celpy.json_to_cel(node)})
            if not bool(ok):
                broken.append(message)
    return broken


def policy(targets, limits):
    return {"spec": {"targetRefs": targets, "limits": limits}}


GW = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "edge"}
ROUTE = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r", "sectionName": "login"}
ING = {"group": "networking.k8s.io", "kind": "Ingress", "name": "shop"}
LIMIT = {"key": "client_ip", "rate": "10/s"}

CASES = [
    ("a Gateway, a route's rule and an Ingress", policy([GW, ROUTE, ING], {"a": LIMIT}), []),
    ("a concurrency limit needs no rate", policy([GW], {"a": {"key": "client_ip", "algorithm": "concurrency", "burst": 10}}), []),
    ("a quota", policy([GW], {"a": {"key": "jwt:sub", "quota": "1000/month"}}), []),
    ("a global lease", policy([GW], {"a": dict(LIMIT, scope="global", sync="lease")}), []),
    ("an Ingress in the Gateway API's group", policy([dict(ING, group="gateway.networking.k8s.io")], {"a": LIMIT}),
     ["a Gateway, HTTPRoute or GRPCRoute is in gateway.networking.k8s.io, an Ingress in networking.k8s.io"]),
    ("a Gateway in the core group", policy([dict(GW, group="")], {"a": LIMIT}),
     ["a Gateway, HTTPRoute or GRPCRoute is in gateway.networking.k8s.io, an Ingress in networking.k8s.io"]),
    ("an Ingress's section", policy([dict(ING, sectionName="x")], {"a": LIMIT}), ["an Ingress has no sections"]),
    ("no key", policy([GW], {"a": {"rate": "1/s"}}), ["every limit needs a key"]),
    ("no rate", policy([GW], {"a": {"key": "client_ip"}}), ["a limit needs a rate, a quota or a plan (or is a concurrency limit)"]),
    ("a rate and a quota", policy([GW], {"a": dict(LIMIT, quota="5/day")}), ["rate and quota, set one"]),
    ("sync on a local limit", policy([GW], {"a": dict(LIMIT, sync="lease")}), ["sync is for global limits"]),
    ("a challenge URL without the action", policy([GW], {"a": dict(LIMIT, challenge_url="/c")}), ["challenge_url is for action challenge"]),
]


def main(path):
    crd = yaml.safe_load(open(path))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    env = celpy.Environment()
    compiled = []
    for p, rule, message in rules_at(schema):
        compiled.append((p, env.program(env.compile(rule)), message))
    assert compiled, "no rule found"
    failed = 0
    for name, obj, want in CASES:
        got = judge(env, compiled, obj)
        if sorted(got) != sorted(want):
            failed += 1
            print(f"{name}: broke {got}, want {want}")
    print(f"{len(compiled)} rules, {len(CASES)} cases, {failed} judged otherwise")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1])
