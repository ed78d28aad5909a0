"""kube-scheduler's ``DefaultPreemption`` PostFilter: pure decisions (:mod:`.selection`,
:mod:`.candidates`) and the evaluator that runs them and makes the writes (:mod:`.evaluator`)."""
