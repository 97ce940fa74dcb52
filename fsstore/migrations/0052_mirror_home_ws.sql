-- Which home workspace a mirror copies, by id. A name at the home may pass
-- from a deleted workspace to a new one, but an id never does (0050): the
-- id tells a mirror of the old workspace from one of the new. 0 is "not
-- known" (a mirror pulled before): its next pull is a full one.
ALTER TABLE mirrors ADD COLUMN home_ws INTEGER NOT NULL DEFAULT 0;

-- On an executor, the home workspace whose revision home_base is: an
-- exec's push names it, so that it never lands on a namesake.
ALTER TABLE execs ADD COLUMN home_ws INTEGER NOT NULL DEFAULT 0;

-- What an executor learnt of its home at the last handshake, so that it
-- starts, and delivers what waits, while the home is away.
CREATE TABLE executor_home (
	id     INTEGER PRIMARY KEY CHECK (id = 1),
	url    TEXT NOT NULL,
	tenant TEXT NOT NULL
);
