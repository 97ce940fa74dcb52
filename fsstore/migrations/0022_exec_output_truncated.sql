-- Whether an exec's output log stopped at the runner's per-exec byte cap
-- (the command ran on; what it wrote beyond the cap was counted, not kept).
ALTER TABLE execs ADD COLUMN output_truncated INTEGER NOT NULL DEFAULT 0;
