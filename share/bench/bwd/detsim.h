/*
 * detsim.h - a host-only timing model of the Hopper backward's schedule (bwd_bench detsim), to
 * reason about the deterministic mode's cost without a GPU.
 *
 * What it models, per CTA (132): items taken from the counter in the kernel's order (decode_item,
 * or the rejected order of 2026-12-06: key blocks increasing within a row, walks downwards), each
 * item's steps from the producer's walk (fmbwd_walk_next over the item's query heads), and one dQ
 * writer with one staging buffer:
 *   - a step computes for T (partial steps T * tp); its block is staged once computed and once the
 *     writer has read the previous block (the one buffer);
 *   - the writer takes a block once staged and once free; in the deterministic mode it first waits
 *     for the block's turn (the previous visitor's add complete, plus a hand-over delay P); the add's
 *     source is read R after issue (the buffer is free again) and complete L after issue; the
 *     deterministic writer is busy until completion (it hands the turn on), the default one until
 *     the read;
 *   - an item costs O at its start (K/V not hidden) and E at its end (dK, dV stores).
 * Both consumers of a CTA (the two halves of a block) behave alike, so one stands for both. Times
 * in microseconds. It ignores memory-system effects (L2 hit rates, bandwidth), which is what a
 * comparison with the measured ratios can expose.
 */
#pragma once
#include <algorithm>
#include <queue>
#include <vector>

struct DetSimCfg {
  double T = 2.9, tp = 1.1, R = 0.3, L = 1.0, P = 0.2, O = 1.5, E = 1.5;
  int sms = 132;
  int det = 0;     /* 1: turns (main's order); 2: the rejected increasing order with downward walks */
};

struct DetSimStep {
  int rowq, qb, part; /* turn row (batch, query head), query block, partial */
};

/* one mask head's walk data: per key block its visited query blocks (increasing) and partial flags */
struct DetSimMask {
  int nkb = 0, nqb = 0;
  std::vector<std::vector<int>> qbs, part;
};

/* makespan in microseconds for rows = B * Hkv rows of nkb items, G query heads per item */
static double detsim_run(const DetSimMask &m, int rows, int G, int ilv, const DetSimCfg &c)
{
  const int nkb = m.nkb, nqb = m.nqb, nitems = rows * nkb;
  /* predecessor in the turn order of (kb, qb): main's order decreasing, the rejected one increasing */
  std::vector<int> pred((size_t)nkb * nqb, -1);
  {
    std::vector<int> last(nqb, -1);
    for (int i = 0; i < nkb; i++) {
      const int kb = c.det == 2 ? i : nkb - 1 - i;
      for (int qb : m.qbs[kb]) {
        pred[(size_t)kb * nqb + qb] = last[qb];
        last[qb] = kb;
      }
    }
  }
  auto item_of = [&](int t, int *kb, int *row) {
    if (!c.det) {
      *row = t / nkb, *kb = t % nkb;
      return;
    }
    const int per = ilv * nkb, g = t / per, w = t - g * per;
    int cc = rows - g * ilv;
    cc = cc < 1 ? 1 : cc > ilv ? ilv : cc;
    int k = w / cc;
    *row = g * ilv + (w - k * cc);
    *kb = c.det == 2 ? k : nkb - 1 - k;
  };
  /* turn state per (row q, qb): the key block whose add completed last and when */
  const size_t nturn = (size_t)rows * G * nqb;
  std::vector<int> turnK(nturn, -1);
  std::vector<double> turnT(nturn, 0.0);
  std::vector<std::vector<int>> waiters(c.det ? nturn : 0);
  struct Cta {
    std::vector<DetSimStep> st; /* every block of every item taken, in order */
    std::vector<int> kbOf;      /* the key block of each block */
    std::vector<char> itemEnd;  /* 1 where a block is its item's last */
    std::vector<double> base;   /* when the consumer has computed the block (-1: not known yet) */
    size_t s = 0;               /* the writer's next block; its stage time is known once k > s */
    size_t k = 0;               /* blocks whose stage time is known: [0, k) */
    double stage = 0;           /* stage time of block k - 1 */
    double read = 0, wfree = 0, end = 0;
  };
  std::vector<Cta> cta(c.sms);
  int next = 0;
  typedef std::pair<double, long long> Ev; /* time, (cta << 1) | kind: 0 writer block, 1 item request */
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> q;
  auto tstep = [&](const DetSimStep &x) { return x.part ? c.T * c.tp : c.T; };
  /* the consumer stages block k once computed and once the writer has read block k - 1; then its
     item's next block computes, or after its item's last the consumer asks for another */
  auto advance = [&](int ci) {
    Cta &a = cta[ci];
    if (a.k == a.s && a.k < a.st.size() && a.base[a.k] >= 0) {
      a.stage = std::max(a.base[a.k], a.read);
      if (a.itemEnd[a.k]) q.push(Ev(a.stage + c.E, ((long long)ci << 1) | 1));
      else a.base[a.k + 1] = a.stage + tstep(a.st[a.k + 1]);
      a.k++;
      q.push(Ev(std::max(a.stage, a.wfree), (long long)ci << 1));
    }
  };
  auto take = [&](int ci, double t) { /* CTA ci asks for an item at t */
    Cta &a = cta[ci];
    a.end = std::max(a.end, t);
    if (next >= nitems) return;
    int kb, row;
    item_of(next++, &kb, &row);
    const size_t first = a.st.size();
    const size_t n = m.qbs[kb].size();
    for (int g = 0; g < G; g++)
      for (size_t i = 0; i < n; i++) {
        const size_t j = c.det == 2 ? n - 1 - i : i;
        a.st.push_back({row * G + g, m.qbs[kb][j], m.part[kb][j]});
        a.kbOf.push_back(kb);
        a.itemEnd.push_back(0);
        a.base.push_back(-1);
      }
    if (a.st.size() == first) { /* an item with no step: its epilogue only */
      q.push(Ev(t + c.O + c.E, ((long long)ci << 1) | 1));
      return;
    }
    a.itemEnd.back() = 1;
    a.base[first] = t + c.O + tstep(a.st[first]);
    advance(ci);
  };
  for (int ci = 0; ci < c.sms; ci++) q.push(Ev(0.0, ((long long)ci << 1) | 1));
  while (!q.empty()) {
    const Ev e = q.top();
    q.pop();
    const int ci = (int)(e.second >> 1);
    Cta &a = cta[ci];
    if (e.second & 1) {
      take(ci, e.first);
      continue;
    }
    /* the writer's block a.s, staged (a.k == a.s + 1) */
    const size_t s = a.s;
    const DetSimStep &x = a.st[s];
    double issue = std::max(a.stage, a.wfree);
    if (c.det) {
      const size_t tw = (size_t)x.rowq * nqb + x.qb;
      const int pk = pred[(size_t)a.kbOf[s] * nqb + x.qb];
      if (pk >= 0) {
        if (turnK[tw] != pk) { /* the predecessor has not added yet: park */
          waiters[tw].push_back(ci);
          continue;
        }
        issue = std::max(issue, turnT[tw] + c.P);
      }
    }
    if (issue > e.first + 1e-9) { /* not yet: come back then */
      q.push(Ev(issue, e.second));
      continue;
    }
    a.read = issue + c.R;
    const double complete = issue + c.L;
    a.wfree = c.det ? complete : a.read;
    a.end = std::max(a.end, complete);
    if (c.det) {
      const size_t tw = (size_t)x.rowq * nqb + x.qb;
      turnK[tw] = a.kbOf[s];
      turnT[tw] = complete;
      for (int w : waiters[tw]) q.push(Ev(complete + c.P, (long long)w << 1));
      waiters[tw].clear();
    }
    a.s = s + 1;
    advance(ci);
  }
  double mk = 0;
  for (const Cta &a : cta) mk = std::max(mk, a.end);
  return mk;
}
