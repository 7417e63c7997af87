package store

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Template is a row of workflow_templates: one immutable version of a
// workflow template. Its Spec declares the template's params.
type Template struct {
	Project     string              `gorm:"primaryKey" json:"project"`
	Domain      string              `gorm:"primaryKey" json:"domain"`
	Name        string              `gorm:"primaryKey" json:"name"`
	Version     int                 `gorm:"primaryKey" json:"version"`
	Description string              `json:"description"`
	Spec        domain.WorkflowSpec `gorm:"serializer:json" json:"spec"`
	// Digest identifies the version's body (domain.Template.Digest).
	Digest    string     `json:"digest"`
	CreatedAt time.Time  `json:"created_at"`
	DeletedAt *time.Time `json:"deleted_at"`
}

// TableName is workflow_templates.
func (Template) TableName() string { return "workflow_templates" }

// TemplateKey names a template (all its versions) in a project and domain.
type TemplateKey struct{ Project, Domain, Name string }

// pushTemplateSQL inserts @row as the next version of its name unless the
// latest live version has the same digest; it returns the new version's
// number, or no row when the latest is the same. Two pushes of one name at
// once compute the same version: the later insert is a unique violation
// (ErrConflict), retried by PushTemplate.
const pushTemplateSQL = `WITH latest AS (
	SELECT version, digest, deleted_at FROM workflow_templates
	 WHERE project = @project AND domain = @domain AND name = @name ORDER BY version DESC LIMIT 1)
INSERT INTO workflow_templates (project, domain, name, version, description, spec, digest, created_at)
SELECT @project, @domain, @name, coalesce((SELECT version FROM latest), 0) + 1, @description, CAST(@spec AS jsonb), @digest, @now
 WHERE NOT EXISTS (SELECT 1 FROM latest WHERE digest = @digest AND deleted_at IS NULL)
RETURNING version`

// PushTemplate stores t (Version and CreatedAt are set here) as the next
// version of its name, or, when the latest live version has the same
// Digest, returns that version with created false. Errors: the database's.
func (s Templates) PushTemplate(ctx context.Context, t Template) (Template, bool, error) {
	spec, err := encodeRows(t.Spec)
	if err != nil {
		return Template{}, false, err
	}
	t.CreatedAt = time.Now().UTC()
	args := map[string]any{"project": t.Project, "domain": t.Domain, "name": t.Name, "description": t.Description,
		"spec": string(spec), "digest": t.Digest, "now": t.CreatedAt}
	for range 100 {
		var versions []int
		err := s.raw(ctx, pushTemplateSQL, args).Scan(&versions).Error
		if errors.Is(mapErr(err), ErrConflict) {
			continue // a concurrent push took the version: compute it again
		}
		if err != nil {
			return Template{}, false, mapErr(err)
		}
		if len(versions) == 1 {
			t.Version = versions[0]
			return t, true, nil
		}
		same, err := s.GetTemplate(ctx, TemplateKey{t.Project, t.Domain, t.Name}, 0)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile: push again
		}
		return same, false, err
	}
	return Template{}, false, errors.New("push template: too many concurrent pushes of the name")
}

// GetTemplate returns version of the template (0: the latest), unless the
// template is deleted. Errors: ErrNotFound.
func (s Templates) GetTemplate(ctx context.Context, key TemplateKey, version int) (Template, error) {
	q := s.q(ctx).Where("project = ? AND domain = ? AND name = ? AND deleted_at IS NULL", key.Project, key.Domain, key.Name)
	if version > 0 {
		q = q.Where("version = ?", version)
	}
	var t Template
	if err := q.Order("version DESC").Take(&t).Error; err != nil {
		return Template{}, mapErr(err)
	}
	return t, nil
}

// ListTemplates returns a page of the live templates of project/domain
// (the latest version of each), by name, after cursor (the last name of
// the previous page), and the next page's cursor ("" on the last); limit
// is 1 to 500, default 50. Errors: ErrBadCursor (no template name).
func (s Templates) ListTemplates(ctx context.Context, project, dom, cursor string, limit int) ([]Template, string, error) {
	if cursor != "" && !domain.ValidName(cursor) {
		return nil, "", ErrBadCursor
	}
	limit = min(max(cmp.Or(limit, 50), 1), 500)
	var ts []Template
	err := s.q(ctx).Raw(`SELECT DISTINCT ON (name) * FROM workflow_templates
		WHERE project = ? AND domain = ? AND deleted_at IS NULL AND name > ?
		ORDER BY name, version DESC LIMIT ?`, project, dom, cursor, limit+1).Scan(&ts).Error
	if err != nil {
		return nil, "", mapErr(err)
	}
	if len(ts) <= limit {
		return ts, "", nil
	}
	return ts[:limit], ts[limit-1].Name, nil
}

// ListTemplateVersions returns every version of a live template, newest
// first. Errors: ErrNotFound.
func (s Templates) ListTemplateVersions(ctx context.Context, key TemplateKey) ([]Template, error) {
	var ts []Template
	err := s.q(ctx).Where("project = ? AND domain = ? AND name = ? AND deleted_at IS NULL", key.Project, key.Domain, key.Name).
		Order("version DESC").Find(&ts).Error
	if err != nil {
		return nil, mapErr(err)
	}
	if len(ts) == 0 {
		return nil, ErrNotFound
	}
	return ts, nil
}

// DeleteTemplate marks every version of a live template deleted: no new
// run, schedule fire or trigger starts from it. Errors: ErrNotFound.
func (s Templates) DeleteTemplate(ctx context.Context, key TemplateKey) error {
	res := s.q(ctx).Model(&Template{}).
		Where("project = ? AND domain = ? AND name = ? AND deleted_at IS NULL", key.Project, key.Domain, key.Name).
		Update("deleted_at", time.Now().UTC())
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}
