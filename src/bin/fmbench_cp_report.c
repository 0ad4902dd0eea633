/*
 * fmbench_cp_report.c - fmbench -cp's output on rank 0: a line per configuration and pass as it
 * is timed, the plan's speedups per (mask, S, pass), the CSV rows and the summary at the end
 * (fmbench_cp.h; the columns are explained in doc/distributed.md, "Benchmarking context
 * parallelism: fmbench -cp"). Not collective.
 */
#include "fmbench_cp.h"
#include <stdio.h>
#include <string.h>

/* FMBenchCPRatio_Private - base / x in ms, or 0 when either is missing. */
double FMBenchCPRatio_Private(const CPRow *base, const CPRow *x) { return base->done && x->done && x->ms > 0 ? base->ms / x->ms : 0; }

static const char *cp_name(int c) { return c < CP_NCONF ? cp_conf[c].name : "1-GPU"; }

/* FMBenchCPHeader_Private - the header of the per-configuration lines. */
void FMBenchCPHeader_Private(void)
{
  printf("%-22s %7s %-9s %-6s %10s %8s %7s %10s %11s %11s %7s\n", "mask", "seqlen", "config", "pass", "ms", "TFLOP/s", "overlap", "exposed_ms",
         "moved_MB", "allgath_MB", "moved%");
  fflush(stdout);
}

/* FMBenchCPPrintRow_Private - the line of configuration c (CP_NCONF: one GPU) in pass p. */
void FMBenchCPPrintRow_Private(const CPGroup *g, int c, int p, int P)
{
  const CPRow *r = &g->row[c][p];
  char ms[32] = "-", tf[32] = "-", ov[32] = "-", ex[32] = "-", mv[32] = "-", ag[32] = "-", pc[32] = "-";
  if (!r->done) return;
  snprintf(ms, sizeof(ms), "%.3f", r->ms);
  snprintf(tf, sizeof(tf), "%.1f", r->tflops);
  if (r->traced) {
    snprintf(ov, sizeof(ov), "%.3f", r->overlap);
    snprintf(ex, sizeof(ex), "%.3f", r->exposed_max * 1e3);
  }
  if (c < CP_NCONF && P > 1) {
    snprintf(mv, sizeof(mv), "%.1f", r->moved / 1e6);
    snprintf(ag, sizeof(ag), "%.1f", r->allgather / 1e6);
    if (r->allgather > 0) snprintf(pc, sizeof(pc), "%.1f%%", 100.0 * (r->moved / (p == CP_FWDBWD ? 2 : 1)) / r->allgather);
  }
  printf("%-22s %7d %-9s %-6s %10s %8s %7s %10s %11s %11s %7s\n", g->mask, g->S, cp_name(c), cp_pass_name[p], ms, tf, ov, ex, mv, ag, pc);
  fflush(stdout);
}

/* cp_fmt_ms / cp_fmt_x - a time or a speedup, "-" when missing. */
static const char *cp_fmt_ms(char *buf, size_t n, const CPRow *r)
{
  if (r->done) snprintf(buf, n, "%.3f", r->ms);
  else snprintf(buf, n, "-");
  return buf;
}
static const char *cp_fmt_x(char *buf, size_t n, double x)
{
  if (x > 0) snprintf(buf, n, "%.2fx", x);
  else snprintf(buf, n, "-");
  return buf;
}

/* FMBenchCPPrintSpeedups_Private - the plan's speedups over the baselines in pass p. */
void FMBenchCPPrintSpeedups_Private(const CPGroup *g, int p)
{
  char x[3][32];
  const CPRow *r = g->row[0] + p;
  if (!r->done) return;
  printf("  speedup of plan (%s): vs allgather %s, vs ring %s, vs 1 GPU %s\n", cp_pass_name[p],
         cp_fmt_x(x[0], 32, FMBenchCPRatio_Private(&g->row[1][p], r)), cp_fmt_x(x[1], 32, FMBenchCPRatio_Private(&g->row[2][p], r)),
         cp_fmt_x(x[2], 32, FMBenchCPRatio_Private(&g->row[3][p], r)));
  fflush(stdout);
}

/* FMBenchCPCSVHeader_Private - the CSV's header line. */
void FMBenchCPCSVHeader_Private(FILE *fp)
{
  if (!fp) return;
  fprintf(fp, "mask,seqlen,config,pass,ranks,batch,heads,heads_kv,head_dim,dtype,ms,tflops,overlap_efficiency,exposed_max_ms,exposed_mean_ms,"
              "compute_imbalance,overlap_forward,bytes_moved,bytes_intra,bytes_inter,bytes_reduce,bytes_allgather,speedup_vs_allgather,"
              "speedup_vs_ring,speedup_vs_1gpu,route,label\n");
  fflush(fp);
}

/* cp_csv_x - a speedup field (empty when missing) and its comma. */
static void cp_csv_x(FILE *fp, double x)
{
  if (x > 0) fprintf(fp, "%.3f", x);
  fprintf(fp, ",");
}

/* FMBenchCPCSVGroup_Private - the rows of one (mask, S), every pass. route: the plans' route. */
void FMBenchCPCSVGroup_Private(FILE *fp, const CPGroup *g, const CPArgs *a, int P, const char *route)
{
  if (!fp) return;
  for (int p = 0; p < CP_NPASS; p++)
    for (int c = 0; c <= CP_NCONF; c++) {
      const CPRow *r = &g->row[c][p];
      if (!r->done) continue;
      fprintf(fp, "%s,%d,%s,%s,%d,1,%d,%d,%d,%s,%.4f,%.2f,", g->mask, g->S, c < CP_NCONF ? cp_conf[c].name : "1gpu", cp_pass_name[p],
              c < CP_NCONF ? P : 1, a->sh.H, a->sh.Hkv, a->sh.D, FMDTypeName(a->sh.dt), r->ms, r->tflops);
      if (r->traced)
        fprintf(fp, "%.4f,%.4f,%.4f,%.4f,%.4f,", r->overlap, r->exposed_max * 1e3, r->exposed_mean * 1e3, r->imbalance, r->overlap_fwd);
      else fprintf(fp, ",,,,,");
      if (c < CP_NCONF && P > 1) fprintf(fp, "%.0f,%.0f,%.0f,%.0f,%.0f,", r->moved, r->lvl[0], r->lvl[1], r->reduce, r->allgather);
      else fprintf(fp, ",,,,,");
      if (c == 0) {
        cp_csv_x(fp, FMBenchCPRatio_Private(&g->row[1][p], r));
        cp_csv_x(fp, FMBenchCPRatio_Private(&g->row[2][p], r));
        cp_csv_x(fp, FMBenchCPRatio_Private(&g->row[3][p], r));
      } else {
        fprintf(fp, ",,,");
      }
      fprintf(fp, "%s,%s\n", c < CP_NCONF && P > 1 ? route : "", a->label);
    }
  fflush(fp);
}

/* FMBenchCPSummary_Private - the compact table at the end, a block per chosen pass. */
void FMBenchCPSummary_Private(const CPGroup *g, int n, int passes)
{
  for (int p = 0; p < CP_NPASS; p++) {
    if (!(passes & 1 << p)) continue;
    printf("\nsummary, %s (ms; speedup = baseline ms / plan ms; overlap = overlap efficiency of plan's %s)\n", cp_pass_name[p],
           p == CP_FWD ? "forward" : "backward");
    printf("%-22s %7s %10s %10s %10s %10s %9s %9s %9s %7s\n", "mask", "seqlen", "plan", "allgather", "ring", "1-GPU", "vs_allg", "vs_ring",
           "vs_1GPU", "overlap");
    for (int i = 0; i < n; i++) {
      char b[8][32];
      const CPRow *r0 = &g[i].row[0][p], *r1 = &g[i].row[1][p], *r2 = &g[i].row[2][p], *r3 = &g[i].row[3][p];
      if (r0->traced) snprintf(b[7], sizeof(b[7]), "%.3f", r0->overlap);
      else snprintf(b[7], sizeof(b[7]), "-");
      printf("%-22s %7d %10s %10s %10s %10s %9s %9s %9s %7s\n", g[i].mask, g[i].S, cp_fmt_ms(b[0], 32, r0), cp_fmt_ms(b[1], 32, r1),
             cp_fmt_ms(b[2], 32, r2), cp_fmt_ms(b[3], 32, r3), cp_fmt_x(b[4], 32, FMBenchCPRatio_Private(r1, r0)),
             cp_fmt_x(b[5], 32, FMBenchCPRatio_Private(r2, r0)), cp_fmt_x(b[6], 32, FMBenchCPRatio_Private(r3, r0)), b[7]);
    }
  }
  fflush(stdout);
}
