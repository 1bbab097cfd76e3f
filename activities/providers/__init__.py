"""Model providers: each turns a neutral `ModelRequest` into one model call and the reply back
into a neutral `ModelResponse`. Retries are Temporal's, never the SDK's."""
