package fsstore

// SetStageChunk makes commitStage move n rows per statement until the
// returned function restores the default.
func SetStageChunk(n int) func() {
	old := stageChunk
	stageChunk = n
	return func() { stageChunk = old }
}
