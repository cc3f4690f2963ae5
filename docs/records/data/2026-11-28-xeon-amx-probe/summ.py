import json, glob, collections
for f in sorted(glob.glob('/tmp/ana/ev/*.json')):
    v = json.load(open(f)); rows = [r for r in v['rows'] if r.get('decision')]
    c = collections.Counter(r['decision'] for r in rows)
    t = v['run']['timing']; a = v['run']['adaptive']
    print(f.split('/')[-1], dict(c), f"decided {1 - c['undecided']/len(rows):.2f}", "total", t['total_s'], "planned", t['planned_s'], "adaptive", t['adaptive_s'], "extra rounds", len(a['selected']), a['stopped'])
