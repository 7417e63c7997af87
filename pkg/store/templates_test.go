package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store"
	"github.com/stretchr/testify/require"
)

// template is a store.Template of twoSteps named name in p/d with
// description.
func template(name, description string) store.Template {
	spec := twoSteps()
	spec.Normalize()
	t := domain.Template{Name: name, Description: description, Spec: spec}
	return store.Template{Project: "p", Domain: "d", Name: name, Description: description, Spec: spec, Digest: t.Digest()}
}

// A push of the latest version's body is that version; a changed one is
// the next; a deleted template is gone from reads and lists, and comes
// back with the next version.
func TestPushTemplateVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	tpl := st.Templates()
	key := store.TemplateKey{Project: "p", Domain: "d", Name: "etl"}

	v1, created, err := tpl.PushTemplate(ctx, template("etl", "one"))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 1, v1.Version)
	same, created, err := tpl.PushTemplate(ctx, template("etl", "one"))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, 1, same.Version)
	v2, created, err := tpl.PushTemplate(ctx, template("etl", "two"))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 2, v2.Version)

	latest, err := tpl.GetTemplate(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, "two", latest.Description)
	old, err := tpl.GetTemplate(ctx, key, 1)
	require.NoError(t, err)
	require.Equal(t, "one", old.Description)
	_, err = tpl.GetTemplate(ctx, key, 3)
	require.ErrorIs(t, err, store.ErrNotFound)

	require.NoError(t, tpl.DeleteTemplate(ctx, key))
	require.ErrorIs(t, tpl.DeleteTemplate(ctx, key), store.ErrNotFound)
	_, err = tpl.GetTemplate(ctx, key, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, _, err := tpl.ListTemplates(ctx, "p", "d", "", 0)
	require.NoError(t, err)
	require.Empty(t, list)

	back, created, err := tpl.PushTemplate(ctx, template("etl", "two"))
	require.NoError(t, err)
	require.True(t, created, "a deleted template's body is pushed again as a new version")
	require.Equal(t, 3, back.Version)
}

// Concurrent pushes of different bodies of one name each get a version of
// their own, 1..n with none lost; pushes of one body get one version.
func TestPushTemplateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	const n = 8
	var wg sync.WaitGroup
	versions := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tp, _, err := st.Templates().PushTemplate(ctx, template("fan", time.Duration(i).String()))
			versions[i], errs[i] = tp.Version, err
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		seen[versions[i]] = true
	}
	require.Len(t, seen, n)
	for v := 1; v <= n; v++ {
		require.True(t, seen[v], "version %d", v)
	}

	for i := range n {
		wg.Go(func() {
			tp, _, err := st.Templates().PushTemplate(ctx, template("one", "same"))
			versions[i], errs[i] = tp.Version, err
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, 1, versions[i])
	}
}

// ListTemplates pages the latest version of each live template by name.
func TestListTemplates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openWithDB(t)
	for _, name := range []string{"c", "a", "b"} {
		_, _, err := st.Templates().PushTemplate(ctx, template(name, "v1"))
		require.NoError(t, err)
	}
	_, _, err := st.Templates().PushTemplate(ctx, template("a", "v2"))
	require.NoError(t, err)
	page, next, err := st.Templates().ListTemplates(ctx, "p", "d", "", 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, []string{"a", "b"}, []string{page[0].Name, page[1].Name})
	require.Equal(t, 2, page[0].Version)
	rest, next, err := st.Templates().ListTemplates(ctx, "p", "d", next, 2)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, rest, 1)
	require.Equal(t, "c", rest[0].Name)
}
