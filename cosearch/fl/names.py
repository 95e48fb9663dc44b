"""Names of the built-in FL models, importable without torch (the command line and the Flower
app template list them; a test keeps them equal to :data:`cosearch.fl.models.MODELS`)."""

MODEL_NAMES = ("mlp", "resmlp", "femnist_cnn", "cifar_vgg", "shakespeare_lstm")
