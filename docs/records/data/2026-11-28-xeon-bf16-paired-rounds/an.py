import json, sys
for path in sys.argv[1:]:
    v = json.load(open(path))
    rows = [r for r in v["rows"] if r.get("decision")]
    dec = [r for r in rows if r["decision"] != "undecided"]
    slow = [r["impl"] + "[" + r["case"] + "]" for r in rows if r["decision"] == "slower"]
    widths = sorted(r["interval"][1] / r["interval"][0] for r in rows if r.get("interval"))
    t = v["run"]["timing"]
    print(f"{path}: decided {len(dec)}/{len(rows)}, slower {slow or 0}, failures {len(v['failures'])}, "
          f"median width {widths[len(widths)//2]:.4f}, total {t['total_s']} s (planned {t['planned_s']}, adaptive {t['adaptive_s']}), "
          f"rounds {v['run']['planned_rounds']}+{len(v['run']['adaptive']['selected'])}")
