package store

import "context"

// AliveWorkerLabels returns the labels of every alive worker but except
// (a worker id; "" for none), one map a worker: what the scheduler reads
// to tell whether any worker may still run a plugin
// (domain.WorkerView.RunsPlugin). Reads workers.
func (s Workers) AliveWorkerLabels(ctx context.Context, except string) ([]map[string]string, error) {
	var rows []Worker
	q := s.q(ctx).Model(&Worker{}).Select("id", "labels").Where("state = ?", WorkerAlive)
	if except != "" {
		q = q.Where("id <> ?", except)
	}
	if err := q.Find(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make([]map[string]string, len(rows))
	for i, w := range rows {
		out[i] = w.Labels
	}
	return out, nil
}
