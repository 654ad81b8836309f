#!/usr/bin/env python3
"""The structure the code keeps, checked from its sources:

- no import circle between the modules of a crate: module A uses module B when A names an
  item B defines (re-exports followed); a module and its ancestors are the tree itself (a
  parent declares and re-exports its children, a child uses what its parent shares), so only
  edges between modules of different branches count;
- no function of the planner (crates/leasehold/src/planner*) over 120 lines, so that each
  rule reads on its own;
- no source file (Rust or the monitor's script) over 700 lines in crates/*/src and
  examples/*/src, the test suites aside (tests.rs, tests/, the stores' conformance suite in
  crates/leasehold/src/testing/).

    scripts/structure.py            checks the workspace; exit status 1 on any finding
"""
import os, re, sys
from collections import defaultdict

def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'): continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('lib', 'main') and len(rel) == 1: path = ()
            elif rel[-1] == 'mod': path = tuple(rel[:-1])
            else: path = tuple(rel)
            mods[path] = p
    return mods

def strip(text):
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    # A file's test module comes last and may use anything: it is left out.
    m = re.search(r'#\[cfg\(test\)\]\s*mod \w+\s*\{', text)
    if m: text = text[:m.start()]
    return text

ITEM = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*(?:struct|enum|fn|trait|const|static|type|macro_rules!|union)\s+(\w+)', re.M)
REEXPORT = re.compile(r'^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);', re.M)

def expand(use):
    """`a::{b, c::{d}}` as `[a::b, a::c::d]`."""
    use = use.replace(' ', '').replace('\n', '')
    m = re.match(r'^(.*?)\{(.*)\}$', use)
    if not m: return [use]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ''
    for ch in inner:
        if ch == ',' and depth == 0: parts.append(cur); cur = ''; continue
        depth += ch == '{'; depth -= ch == '}'; cur += ch
    if cur: parts.append(cur)
    out = []
    for p in parts:
        for e in expand(p): out.append(prefix + e)
    return out

def circles(src):
    mods = modules(src)
    texts = {m: strip(open(p).read()) for m, p in mods.items()}
    defines = {m: set(ITEM.findall(t)) for m, t in texts.items()}
    reexports = defaultdict(dict)  # module -> ident -> full path
    def absolute(m, path):
        """`path` as named in module `m`, from the crate root; None outside the crate."""
        segs = path.split('::')
        if segs[0] == 'crate': base = (); segs = segs[1:]
        elif segs[0] == 'self': base = m; segs = segs[1:]
        elif segs[0] == 'super':
            base = m
            while segs and segs[0] == 'super': base = base[:-1]; segs = segs[1:]
        elif tuple(m) + (segs[0],) in mods: base = m
        else: return None
        return base + tuple(s for s in segs if s)
    for m, t in texts.items():
        for u in REEXPORT.findall(t):
            for e in expand(u):
                e = e.split('as')[0] if '::' in e and ' as ' in e else e
                a = absolute(m, e)
                if a and a[-1] not in ('*', 'self'): reexports[m][a[-1]] = a
    def resolve(a, depth=0):
        """The module that defines what the absolute path `a` names."""
        for cut in range(len(a), -1, -1):
            mod = a[:cut]
            if mod in mods:
                rest = a[cut:]
                if not rest: return mod
                ident = rest[0]
                if ident in defines[mod]: return mod
                if ident in reexports[mod] and depth < 10:
                    return resolve(reexports[mod][ident] + rest[1:], depth + 1)
                return mod
        return None
    edges = defaultdict(set)
    PATH = re.compile(r'\b((?:crate|super|self)(?:::\w+)+)')
    USE = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);', re.M)
    for m, t in texts.items():
        targets = []
        for u in USE.findall(t):
            for e in expand(u):
                e = re.sub(r'as\w+$', '', e)
                targets.append(e)
        body = USE.sub('', t)
        targets += PATH.findall(body)
        for e in targets:
            a = absolute(m, e)
            if a is None: continue
            if a[-1] in ('*', 'self'): a = a[:-1]
            d = resolve(a)
            if d is None or d == m: continue
            # a parent naming its own descendant (declaring, re-exporting) is not a use upward
            # a module and its ancestors form the tree itself: a parent declares and re-exports
            # its children, a child uses what its parent shares; only other edges can circle
            if d[:len(m)] == m or m[:len(d)] == d:
                continue
            edges[m].add(d)
    # Circles are the strongly connected components of more than one module (Tarjan).
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: sccs.append(comp)
    for v in list(mods): 
        if v not in index: visit(v)
    findings = []
    for c in sccs:
        names = sorted('::'.join(x) or 'crate' for x in c)
        uses = sorted(
            f"{'::'.join(x) or 'crate'} -> {'::'.join(y) or 'crate'}"
            for x in c for y in edges[x] if y in c
        )
        findings.append(f"{src}: import circle {' <-> '.join(names)} ({'; '.join(uses)})")
    return findings



FN = re.compile(r'\s*(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?fn\s+(\w+)')


def long_functions(path, limit):
    """Functions of `path` over `limit` lines, counted from `fn` to the closing brace."""
    lines = open(path).read().split('\n')
    findings = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, started = 0, False
        for j in range(i, len(lines)):
            text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', re.sub(r'//.*', '', lines[j]))
            for ch in text:
                if ch == '{':
                    depth, started = depth + 1, True
                elif ch == '}':
                    depth -= 1
            if started and depth == 0:
                break
            if not started and text.rstrip().endswith(';'):
                break
        length = j - i + 1
        if length > limit:
            findings.append(f"{path}:{i + 1}: fn {m.group(5)} is {length} lines (at most {limit})")
    return findings


def long_files(limit):
    """Source files over `limit` lines, the test suites aside."""
    findings = []
    for parent in ('crates', 'examples'):
        for name in sorted(os.listdir(parent)):
            for folder, _, files in os.walk(os.path.join(parent, name, 'src')):
                parts = folder.split(os.sep)
                if 'tests' in parts or 'testing' in parts:
                    continue
                for f in sorted(files):
                    if not f.endswith(('.rs', '.js')) or f == 'tests.rs':
                        continue
                    path = os.path.join(folder, f)
                    count = sum(1 for _ in open(path))
                    if count > limit:
                        findings.append(f"{path}: {count} lines (at most {limit})")
    return findings


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    os.chdir(root)
    findings = []
    for parent in ('crates', 'examples'):
        for name in sorted(os.listdir(parent)):
            src = os.path.join(parent, name, 'src')
            if os.path.isdir(src):
                findings += circles(src)
    planner = ['crates/leasehold/src/planner.rs']
    for folder, _, files in os.walk('crates/leasehold/src/planner'):
        planner += [os.path.join(folder, f) for f in files if f.endswith('.rs') and f != 'tests.rs']
    for path in sorted(planner):
        findings += long_functions(path, 120)
    findings += long_files(700)
    for finding in findings:
        print(finding)
    if findings:
        sys.exit(1)
    print('structure: no import circle; no planner function over 120 lines; no file over 700')


if __name__ == '__main__':
    main()
