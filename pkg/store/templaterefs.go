package store

import (
	"context"
	"fmt"
)

// TemplateRef names one version of a template; Version 0 is the latest.
type TemplateRef struct {
	TemplateKey
	Version int
}

// templateRefsSQL reads, for each (project, domain, name, version) of four
// arrays, that live version of the template, or its latest when the version
// is 0, as JSON with the version asked for.
const templateRefsSQL = `SELECT v.version AS asked, row_to_json(t) AS row
  FROM unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS int[])) AS v(p, d, n, version)
 CROSS JOIN LATERAL (SELECT * FROM workflow_templates w
	WHERE w.project = v.p AND w.domain = v.d AND w.name = v.n AND w.deleted_at IS NULL
	  AND (v.version = 0 OR w.version = v.version)
	ORDER BY w.version DESC LIMIT 1) t`

// TemplateVersions returns the templates refs name, each as GetTemplate
// reads it, in one statement; a ref whose template or version does not
// exist, or is deleted, is absent from the map.
func (s Templates) TemplateVersions(ctx context.Context, refs []TemplateRef) (map[TemplateRef]Template, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	p, d, n, v := make([]string, len(refs)), make([]string, len(refs)), make([]string, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		p[i], d[i], n[i], v[i] = r.Project, r.Domain, r.Name, int32(r.Version)
	}
	var rows []struct {
		Asked int
		Row   []byte
	}
	if err := s.raw(ctx, templateRefsSQL, array(p), array(d), array(n), array(v)).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := make(map[TemplateRef]Template, len(rows))
	for _, r := range rows {
		var t Template
		if err := decodeRows(r.Row, &t); err != nil {
			return nil, fmt.Errorf("decode template: %w", err)
		}
		out[TemplateRef{TemplateKey{t.Project, t.Domain, t.Name}, r.Asked}] = t
	}
	return out, nil
}
