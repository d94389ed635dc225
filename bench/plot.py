"""Plots for a bench/run result: plot.py RESULTS.json OUTDIR (needs matplotlib).

throughput.png   median MiB/s per job and system, whiskers = min..max over repetitions
cpu_per_gib.png  server CPU seconds per GiB moved (user solid, system hatched on top)
page_cache.png   host page-cache growth (Cached) per GiB moved
file_cache.png   page cache held by the benchmark's own files (fincore) per GiB moved
overwrite.png    small-overwrite latency per call (p50, whiskers p99)
metadata.png     metadata jobs: files per second (median, whiskers min..max)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"dionfs-buffered": "#1f77b4", "dionfs-dontcache": "#17becf", "dionfs-direct": "#2ca02c",
          "dionfs-direct-crc": "#bcbd22", "dionfs-direct-crc-ovl": "#8c6d31",
          "dionfs-direct-crc-seq": "#dbdb8d",
          "dionfs-async": "#98df8a", "ganesha": "#d62728", "fio-buffered": "#7f7f7f", "fio-direct": "#222222",
          "dionfs-direct-v3": "#9467bd", "dionfs-direct-v41": "#c5b0d5", "ganesha-v41": "#ff9896",
          "dionfs-direct-v40": "#8c564b", "ganesha-v40": "#ff7f0e",
          "dionfs-direct-tls": "#e377c2"}


def bars(ax, res, jobs, metric, ylabel, whiskers=True, stacked_sys=False, zero_line=False):
    systems = list(res["systems"])
    n = len(systems)
    width = 0.8 / max(n, 1)
    for i, s in enumerate(systems):
        xs, ys, lo, hi, sys_part = [], [], [], [], []
        for x, j in enumerate(jobs):
            e = res["summary"][j["name"]].get(s, {})
            v = e.get(metric)
            if not v:
                continue
            xs.append(x + (i - (n - 1) / 2) * width)
            ys.append(v["median"])
            lo.append(v["median"] - v["min"])
            hi.append(v["max"] - v["median"])
            if stacked_sys:
                sv = e.get("cpu_sys_s_per_gib")
                sys_part.append(sv["median"] if sv else 0)
        if not xs:
            continue
        label = res["systems"][s]
        if stacked_sys:
            ax.bar(xs, ys, width, color=COLORS.get(s), label=label + " (user)")
            ax.bar(xs, sys_part, width, bottom=ys, color=COLORS.get(s), alpha=0.45, hatch="//",
                   edgecolor="white")
        else:
            ax.bar(xs, ys, width, color=COLORS.get(s), label=label,
                   yerr=[lo, hi] if whiskers else None, capsize=2, ecolor="#444")
    ax.set_xticks(range(len(jobs)))
    ax.set_xticklabels([j["name"] for j in jobs], rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def main():
    res = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    tput = [j for j in res["jobs"] if j["kind"] == "tput"]
    lat = [j for j in res["jobs"] if j["kind"] == "lat"]
    meta = [j for j in res["jobs"] if j["kind"] == "meta"]
    stamp = res["meta"]["started"] + (" (smoke)" if res["meta"]["smoke"] else "")

    if tput:
        # 4 KiB random jobs and large-transfer jobs differ ~10x in scale: own panels
        small = [j for j in tput if j["name"].startswith("rand-")]
        large = [j for j in tput if not j["name"].startswith("rand-")]
        groups = [g for g in (large, small) if g]

        def figure(fname, title, metric, ylabel, **kw):
            fig, axes = plt.subplots(1, len(groups), figsize=(14, 5.5),
                                     gridspec_kw={"width_ratios": [len(g) for g in groups]})
            axes = axes if len(groups) > 1 else [axes]
            for ax, g in zip(axes, groups):
                bars(ax, res, g, metric, ylabel, **kw)
                if kw.get("zero_line"):
                    ax.axhline(0, color="black", lw=0.6)
            for ax in axes[1:]:
                ax.get_legend().remove()
            fig.suptitle(f"{title} — {stamp}")
            fig.tight_layout()
            fig.savefig(os.path.join(out, fname), dpi=110)
            plt.close(fig)

        figure("throughput.png", "Throughput by system and mode", "mib_s",
               "MiB/s (median; whiskers min–max)")
        figure("cpu_per_gib.png", "Server CPU per GiB moved (user solid, system hatched on top)",
               "cpu_user_s_per_gib", "CPU s per GiB", whiskers=False, stacked_sys=True)
        figure("page_cache.png", "Host page-cache growth (Cached, whole host) per GiB moved",
               "cache_mib_per_gib", "MiB per GiB moved", zero_line=True)
        figure("file_cache.png", "Page cache held by the benchmark's files after each job (fincore)",
               "files_cache_mib_per_gib", "MiB per GiB moved", zero_line=True)

    if lat:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        systems = list(res["systems"])
        n = len(systems)
        width = 0.8 / max(n, 1)
        for i, s in enumerate(systems):
            xs, ys, up = [], [], []
            for x, j in enumerate(lat):
                e = res["summary"][j["name"]].get(s, {})
                if not e.get("p50"):
                    continue
                xs.append(x + (i - (n - 1) / 2) * width)
                ys.append(e["p50"]["median"])
                up.append(max(0, e["p99"]["median"] - e["p50"]["median"]) if e.get("p99") else 0)
            if xs:
                ax.bar(xs, ys, width, color=COLORS.get(s), label=res["systems"][s],
                       yerr=[[0] * len(up), up], capsize=2, ecolor="#444")
        ax.set_yscale("log")
        ax.set_xticks(range(len(lat)))
        ax.set_xticklabels([j["name"] for j in lat])
        ax.set_ylabel("µs per call (p50; whisker to p99), log scale")
        ax.set_title(f"Small overwrites at offset 0 of a 10 MiB file — {stamp}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "overwrite.png"), dpi=110)
        plt.close(fig)

    if meta:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        bars(ax, res, meta, "iops", "files per second (median; whiskers min–max)")
        ax.set_title(f"Metadata: create/rename/remove of small files — {stamp}")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "metadata.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
