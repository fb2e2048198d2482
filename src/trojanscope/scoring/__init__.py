"""Scoring harness: run a detector over a zoo and score it exactly as TrojAI did.

* ``harness.evaluate_detector(zoo, out, NAME, ...)`` and ``harness.evaluate_command(zoo, out, CMD, ...)``, one entry
  per mode with only its own options (``harness.evaluate(detector=... | command=...)`` picks one) ->
  ``EvaluationResult`` — the runner (neutral shuffled copies, per-model time limit, parallel workers, resumable
  ``results.csv``);
* ``metrics`` — cross-entropy (float64, clipped to [1e-12, 1 − 1e-12]) and its 95% CI, Brier,
  ROC-AUC, average precision, TPR at 5% FPR, FPR at 95% TPR, confusion at 0.5, base-rate/target CE;
* ``breakdown`` — metrics per METADATA factor level and the prevalence sweep;
* ``report.write_report(run_dir)`` — self-contained HTML and Markdown report;
* ``cli`` — ``trojanscope evaluate | score | report``.

Nothing is imported here, so ``trojanscope --help`` stays fast.
"""
