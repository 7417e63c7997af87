package runner

// hook binds Spec.OnOutput to one stream; nil when on is nil.
func hook(on func(stream string, p []byte), stream string) func([]byte) {
	if on == nil {
		return nil
	}
	return func(p []byte) { on(stream, p) }
}
