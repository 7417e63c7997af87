package archive

import (
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
)

// Version is the Document.Version Put writes. A reader decodes the
// versions it knows; Get refuses a newer one.
const Version = 1

// Document is one archived run: everything GET run answers, and every
// task, attempt, event and (the end of) every attempt's logs. Rows are the
// store's, with their column names as JSON names; secret_env values are
// masked in the run's spec and in each action's, as the API shows them.
type Document struct {
	// Version is the document format's, Version when Put wrote it.
	Version int `json:"version"`
	// ArchivedAt is when Put read the run.
	ArchivedAt time.Time `json:"archived_at"`
	// LogTailBytes is the bound of each Stream.Text, in bytes.
	LogTailBytes int       `json:"log_tail_bytes"`
	Run          store.Run `json:"run"`
	// Children are the run's child runs, as GET run lists them.
	Children []store.RunChild `json:"children"`
	// Outputs are the outputs of its steps, step → output → value
	// (store.Actions.StepOutputs).
	Outputs map[string]map[string]string `json:"outputs"`
	// Actions are the run's actions in GET run's order: a0, then its
	// steps in spec order.
	Actions []Action `json:"actions"`
	// Events are the run's run_events rows, in id order.
	Events []store.RunEvent `json:"events"`
}

// Action is an action with every one of its tasks.
type Action struct {
	Action store.Action `json:"action"`
	// TaskCounts counts the tasks of the action's current generation by
	// state name ("SUCCEEDED"); TaskCount is their sum.
	TaskCounts map[string]int `json:"task_counts"`
	TaskCount  int            `json:"task_count"`
	// Tasks are every task of every generation, the current one first,
	// each generation in index order (store.TaskPage's order).
	Tasks []Task `json:"tasks"`
}

// Task is a task with its attempts, oldest first.
type Task struct {
	Task     store.Task `json:"task"`
	Attempts []Attempt  `json:"attempts"`
}

// Attempt is an attempt (its state, worker, exit code, error, cause:
// user, system…, code and times) with the end of its logs.
type Attempt struct {
	Attempt store.Attempt `json:"attempt"`
	Logs    Logs          `json:"logs"`
}

// Logs is the end of an attempt's output, per stream, as GET logs showed
// it.
type Logs struct {
	Stdout Stream `json:"stdout"`
	Stderr Stream `json:"stderr"`
}

// Stream is the end of one stream of an attempt's output.
type Stream struct {
	// Text is the stream's last bytes, at most Document.LogTailBytes.
	Text string `json:"text"`
	// Bytes is how many bytes of the stream Capstan held.
	Bytes int64 `json:"bytes"`
	// Cut is true when Text is not the whole of what the attempt wrote on
	// the stream: the document, or Capstan before it, kept only its end.
	Cut bool `json:"cut"`
}

// Detail is the run as GET run reads it (store.Runs.GetRun): each action
// with its first store.RunTasksPerAction tasks, its task counts, and no
// next page (an archived run has no task pages to read on).
func (d Document) Detail() store.RunDetail {
	out := store.RunDetail{Run: d.Run, Children: d.Children, Actions: make([]store.ActionDetail, len(d.Actions))}
	for i, a := range d.Actions {
		ad := store.ActionDetail{Action: a.Action, TaskCount: a.TaskCount}
		if len(a.TaskCounts) > 0 {
			ad.TaskCounts = make(map[domain.TaskState]int, len(a.TaskCounts))
			for name, n := range a.TaskCounts {
				if st, ok := domain.ParseTaskState(name); ok {
					ad.TaskCounts[st] = n
				}
			}
		}
		tasks := a.Tasks[:min(len(a.Tasks), store.RunTasksPerAction)]
		if len(tasks) > 0 {
			ad.Tasks = make([]store.TaskDetail, len(tasks))
		}
		for j, t := range tasks {
			td := store.TaskDetail{Task: t.Task}
			if len(t.Attempts) > 0 {
				td.Attempts = make([]store.Attempt, len(t.Attempts))
			}
			for k, at := range t.Attempts {
				td.Attempts[k] = at.Attempt
			}
			ad.Tasks[j] = td
		}
		out.Actions[i] = ad
	}
	return out
}
