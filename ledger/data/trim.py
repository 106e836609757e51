import sys, types, json, datetime
sys.modules['httpx2'] = types.ModuleType('httpx2')
# argv: the output file, the unpacked wheel's folder (pip download --no-deps genai-prices==0.2.3)
sys.path.insert(0, sys.argv[2])
from genai_prices.data import providers
from genai_prices import types as T
from decimal import Decimal

KEEP = ['openai','anthropic','google','aws','mistral','azure']
def clause(c):
    n = type(c).__name__
    if n == 'ClauseEquals': return {'equals': c.equals}
    if n == 'ClauseStartsWith': return {'starts_with': c.starts_with}
    if n == 'ClauseEndsWith': return {'ends_with': c.ends_with}
    if n == 'ClauseContains': return {'contains': c.contains}
    if n == 'ClauseRegex': return regex(c.regex)
    if n == 'ClauseOr': return {'or': [clause(x) for x in c.or_]}
    if n == 'ClauseAnd': return {'and': [clause(x) for x in c.and_]}
    raise Exception(n)
def regex(r):
    # Rust's regex has no look-around: a leading `^(?!X)Y` becomes "not ^X, and ^Y".
    if not r.startswith('^(?!'):
        return {'regex': r}
    depth, i = 1, 4
    while depth:
        depth += {'(': 1, ')': -1}.get(r[i], 0) if r[i - 1] != '\\' else 0
        i += 1
    ahead, rest = r[4:i - 1], r[i:]
    no = {'not': {'regex': '^' + ahead}}
    return no if not rest else {'and': [no, regex('^' + rest)]}
latest = datetime.date(2000,1,1)
# The day the table was vendored: prices announced for later days are not yet in force.
TODAY = datetime.date(2026,11,27)
def price(v):
    if v is None: return None
    if isinstance(v, Decimal): return str(v)
    if type(v).__name__ == 'TieredPrices':
        return {'base': str(v.base), 'tiers': [{'start': t.start, 'price': str(t.price)} for t in v.tiers]}
    raise Exception(type(v))
FIELDS = {'input_mtok':'input_mtok','output_mtok':'output_mtok','cache_read_mtok':'cache_read_mtok','cache_write_mtok':'cache_write_mtok'}
skipped = set()
def prices(m):
    global latest
    p = m.prices
    if not isinstance(p, T.ModelPrice):
        chosen = p[0].prices
        for cp in p:
            c = cp.constraint
            if c is None: chosen = cp.prices
            elif type(c).__name__ == 'StartDateConstraint':
                if c.start_date <= TODAY: latest = max(latest, c.start_date); chosen = cp.prices
            # time-of-day prices (off-peak) are not modelled: the first stays
        p = chosen
    out = {}
    for k, v in p.__dict__.items():
        if v is None or k.startswith('_'): continue
        if k in FIELDS: out[k] = price(v)
        else: skipped.add(k)
    return out
doc = {'providers': []}
for p in providers:
    if p.id not in KEEP: continue
    models = []
    for m in p.models:
        pr = prices(m)
        if 'input_mtok' not in pr and 'output_mtok' not in pr: continue
        models.append({'id': m.id, 'match': clause(m.match), 'prices': pr})
    doc['providers'].append({'id': p.id, 'match': clause(p.model_match) if p.model_match else None, 'models': models})
doc = {'source': 'genai-prices 0.2.3 (https://github.com/pydantic/genai-prices), MIT licence, Copyright (c) Pydantic Services Inc.',
       'date': TODAY.isoformat(), 'latest_price_change': latest.isoformat(), **doc}
with open(sys.argv[1], 'w') as f:
    # One model a line: a diff of a newer table reads as the models whose prices changed.
    head = {k: v for k, v in doc.items() if k != 'providers'}
    f.write(json.dumps(head)[:-1] + ',\n "providers": [\n')
    for i, p in enumerate(doc['providers']):
        f.write('  {"id": %s, "match": %s, "models": [\n' % (json.dumps(p['id']), json.dumps(p['match'])))
        f.write(',\n'.join('   ' + json.dumps(m) for m in p['models']))
        f.write('\n  ]}' + (',' if i + 1 < len(doc['providers']) else '') + '\n')
    f.write(' ]\n}\n')
print('latest', latest, 'skipped', skipped, file=sys.stderr)
for p in doc['providers']: print(p['id'], len(p['models']), file=sys.stderr)
