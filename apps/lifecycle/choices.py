from control_plane.choices import text_choices

# What a lifecycle application acts on, and what it does to it.
Target = text_choices("Target", "topic", "binding", ("grant", "Producer grant"), "app")
Operation = text_choices("Operation", "change", "retire", "remove", "revoke", "deactivate",
                         ("activate", "Reactivate"))


# Which operations each target knows, and the noun of each (target, operation) as people say it.
OPERATIONS: dict[str, tuple[str, ...]] = {
    Target.TOPIC: (Operation.CHANGE, Operation.RETIRE),
    Target.BINDING: (Operation.CHANGE, Operation.REMOVE),
    Target.GRANT: (Operation.REVOKE,),
    Target.APP: (Operation.DEACTIVATE, Operation.ACTIVATE),
}
NOUNS = {
    (Target.TOPIC, Operation.CHANGE): "topic change",
    (Target.TOPIC, Operation.RETIRE): "topic retirement",
    (Target.BINDING, Operation.CHANGE): "binding change",
    (Target.BINDING, Operation.REMOVE): "binding removal",
    (Target.GRANT, Operation.REVOKE): "producer grant revocation",
    (Target.APP, Operation.DEACTIVATE): "app deactivation",
    (Target.APP, Operation.ACTIVATE): "app reactivation",
}
# The letter before an application's number: C-15 a change, R-16 a retirement, removal or revocation, A-17 an app's
# (de)activation (new topics, bindings and grants are T-, B-, G-).
PREFIXES = {Operation.CHANGE: "C", Operation.RETIRE: "R", Operation.REMOVE: "R", Operation.REVOKE: "R",
            Operation.DEACTIVATE: "A", Operation.ACTIVATE: "A"}
