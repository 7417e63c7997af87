package store

// The repositories by aggregate. Each is data access only, on the Store it
// came from (a pool, or one transaction): named statements, decoded rows,
// the package's errors.
type (
	// Runs reads and writes runs: creation, listing, locks, phases, and a
	// run's expansion into step actions.
	Runs struct{ *core }
	// Actions reads and writes a run's actions: phases, waits, approvals,
	// retries and outputs of steps.
	Actions struct{ *core }
	// Tasks reads and writes tasks: creation, outcomes, counts, deadlines.
	Tasks struct{ *core }
	// Attempts reads and writes attempts: reports, claims, preemption.
	Attempts struct{ *core }
	// Placement is what a scheduling pass reads and binds: pending tasks,
	// placeable workers and their loads.
	Placement struct{ *core }
	// Workers reads and writes worker registrations and liveness.
	Workers struct{ *core }
	// Aborts reads and writes abort requests of actions and kill requests
	// of attempts.
	Aborts struct{ *core }
	// Events reads the run_events feed.
	Events struct{ *core }
	// Logs reads and writes attempts' log chunks.
	Logs struct{ *core }
	// Cache reads and writes the step cache and its reservations.
	Cache struct{ *core }
	// Tokens reads and writes API tokens.
	Tokens struct{ *core }
	// Templates reads and writes workflow templates and their versions.
	Templates struct{ *core }
	// Schedules reads and writes schedules and their firing state.
	Schedules struct{ *core }
	// Triggers reads and writes event triggers and published events.
	Triggers struct{ *core }
	// History makes and drops the day partitions of the history tables
	// (run_events, attempt_logs, attempt_log_chunks).
	History struct{ *core }
)

// Runs returns the runs repository on s.
func (s *Store) Runs() Runs { return s.runs() }

// Actions returns the actions repository on s.
func (s *Store) Actions() Actions { return s.actions() }

// Tasks returns the tasks repository on s.
func (s *Store) Tasks() Tasks { return s.tasks() }

// Attempts returns the attempts repository on s.
func (s *Store) Attempts() Attempts { return s.attempts() }

// Placement returns the placement repository on s.
func (s *Store) Placement() Placement { return s.placement() }

// Workers returns the workers repository on s.
func (s *Store) Workers() Workers { return s.workers() }

// Aborts returns the aborts repository on s.
func (s *Store) Aborts() Aborts { return s.aborts() }

// Events returns the events repository on s.
func (s *Store) Events() Events { return s.events() }

// Logs returns the logs repository on s.
func (s *Store) Logs() Logs { return s.logs() }

// Cache returns the cache repository on s.
func (s *Store) Cache() Cache { return s.cache() }

// Tokens returns the tokens repository on s.
func (s *Store) Tokens() Tokens { return s.tokens() }

// Templates returns the templates repository on s.
func (s *Store) Templates() Templates { return s.templates() }

// Schedules returns the schedules repository on s.
func (s *Store) Schedules() Schedules { return s.schedules() }

// Triggers returns the triggers repository on s.
func (s *Store) Triggers() Triggers { return s.triggers() }

// History returns the history partitions repository on s.
func (s *Store) History() History { return s.history() }

func (c *core) runs() Runs           { return Runs{c} }
func (c *core) actions() Actions     { return Actions{c} }
func (c *core) tasks() Tasks         { return Tasks{c} }
func (c *core) attempts() Attempts   { return Attempts{c} }
func (c *core) placement() Placement { return Placement{c} }
func (c *core) workers() Workers     { return Workers{c} }
func (c *core) aborts() Aborts       { return Aborts{c} }
func (c *core) events() Events       { return Events{c} }
func (c *core) logs() Logs           { return Logs{c} }
func (c *core) cache() Cache         { return Cache{c} }
func (c *core) tokens() Tokens       { return Tokens{c} }
func (c *core) templates() Templates { return Templates{c} }
func (c *core) schedules() Schedules { return Schedules{c} }
func (c *core) triggers() Triggers   { return Triggers{c} }
func (c *core) history() History     { return History{c} }
